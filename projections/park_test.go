package projections

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/eventstore"
)

// waitParked waits until name has parked an event.
func waitParked(t *testing.T, e *env, name string) *Parked {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		parked, err := loadParked(context.Background(), e.pool, []string{name})
		if err != nil {
			t.Fatal(err)
		}
		if pk := parked[name]; pk != nil {
			return pk
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never parked an event", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPoisonEventIsParked: a projector that fails on one event, however
// often it is retried, parks that event after ParkAfter attempts: its
// checkpoint stays just before it (the events before it in the same batch
// are applied), reads of its read models answer at once with a
// ParkedError naming it and the event, and the other projectors, their
// reads, and the lag readiness counts go on as if it were not there.
// Retry after a fix applies the event; Skip moves past it.
func TestPoisonEventIsParked(t *testing.T) {
	for _, skip := range []bool{false, true} {
		t.Run(fmt.Sprintf("skip=%v", skip), func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			poisoned, healthy := newCounter("poisoned"), newCounter("healthy")
			bad := uuid.New()
			fail := func(ev eventstore.RecordedEvent) bool { return ev.ID == bad }
			poisoned.failOn.Store(&fail)
			before := appendEvents(t, e.store, 3, 1)
			res, err := e.store.Append(ctx, eventstore.StreamAppend{Stream: "s-0", Expected: eventstore.Any,
				Events: []eventstore.EventData{{ID: bad, Type: "Tested", Data: []byte(`{}`)}}})
			if err != nil {
				t.Fatal(err)
			}
			last := appendEvents(t, e.store, 2, 1)
			r := testRunner(e.store, e.pool, e.log, poisoned, healthy)
			r.ParkAfter = 3
			rctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); _ = r.Run(rctx) }()
			defer func() { stop(); <-done }()

			pk := waitParked(t, e, poisoned.name)
			if pk.EventID != bad.String() || pk.Position != res.Position || pk.Reason == "" {
				t.Fatalf("parked %+v, want event %s at %s", pk, bad, res.Position)
			}
			if cp := checkpointOf(t, e.pool, poisoned.name); cp != before {
				t.Fatalf("checkpoint %s, want %s, just before the parked event", cp, before)
			}
			if err := r.WaitFor(ctx, last, healthy.name); err != nil {
				t.Fatalf("a read of the healthy read model: %v", err)
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err = r.WaitFor(wctx, last, poisoned.name)
			cancel()
			var pe *ParkedError
			if !errors.As(err, &pe) || pe.Projector != poisoned.name || pe.EventID != bad.String() || !errors.Is(err, ErrParked) {
				t.Fatalf("a read of the parked read model: %v, want a ParkedError naming it", err)
			}
			if err := r.WaitFor(ctx, last); !errors.As(err, &pe) {
				t.Fatalf("a read of every read model: %v, want the ParkedError", err)
			}
			if lag, _, err := r.Lags(ctx, 100, 0); err != nil || lag != 0 {
				t.Fatalf("lag %d (%v): the parked projector must not count", lag, err)
			}
			st, err := Status(ctx, e.pool, e.store, poisoned, healthy)
			if err != nil || st[0].Parked == nil || st[0].Parked.EventID != bad.String() || st[1].Parked != nil {
				t.Fatalf("status %+v %v", st, err)
			}

			// The fix; then the operator's word.
			poisoned.failOn.Store(nil)
			want := int64(6)
			if skip {
				_, err = Skip(ctx, e.pool, poisoned.name)
				want = 5
			} else {
				_, err = Retry(ctx, e.pool, poisoned.name)
			}
			if err != nil {
				t.Fatal(err)
			}
			// The runner sees the operator's word within LockRetry.
			for deadline := time.Now().Add(10 * time.Second); ; {
				err := r.WaitFor(ctx, last, poisoned.name)
				if err == nil {
					break
				}
				if !errors.As(err, &pe) || time.Now().After(deadline) {
					t.Fatalf("after the operator cleared it: %v", err)
				}
				time.Sleep(10 * time.Millisecond)
			}
			var applied int64
			if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM poisoned_seen WHERE event_id = $1`, bad).Scan(&applied); err != nil {
				t.Fatal(err)
			}
			if (applied == 1) == skip {
				t.Fatalf("the parked event applied %d times after skip=%v", applied, skip)
			}
			if skip {
				// Every event but the skipped one, once each.
				var rows, distinct int64
				if err := e.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id) FROM poisoned_seen`).Scan(&rows, &distinct); err != nil {
					t.Fatal(err)
				}
				if rows != want || distinct != want {
					t.Fatalf("after the skip: %d rows of %d events, want %d once each", rows, distinct, want)
				}
			} else {
				checkExactlyOnce(t, e.pool, poisoned, want)
			}
			if _, err := Retry(ctx, e.pool, poisoned.name); !errors.Is(err, ErrNotParked) {
				t.Fatalf("retry with nothing parked: %v", err)
			}
		})
	}
}

// TestTransientFailuresNeverPark: errors of the connection or the server
// are retried however often they come, never parked.
func TestTransientFailuresNeverPark(t *testing.T) {
	for _, err := range []error{context.DeadlineExceeded, errResync, fmt.Errorf("wrapped: %w", context.Canceled)} {
		if !transient(err) {
			t.Errorf("%v is not transient", err)
		}
	}
	if transient(errors.New("injected failure")) {
		t.Error("an error of the projector counts as transient")
	}
}
