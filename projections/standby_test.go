package projections

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/eventstore"
)

// applyCounter wraps a projector and counts, in memory, the batches and
// events given to its Apply, so two runners of one projector (two
// processes) can be told apart although they write the same tables.
type applyCounter struct {
	Projector
	calls, events atomic.Int64
}

func (a *applyCounter) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error {
	a.calls.Add(1)
	a.events.Add(int64(len(events)))
	return a.Projector.Apply(ctx, tx, events)
}

func isLocal(r *Runner) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.states[0].local
}

// While runner A holds a projector's advisory lock, runner B of the same
// projector (another pool, as another instance) stands by and applies
// nothing, however long it keeps retrying the lock and however many events
// arrive; when A stops, B takes over, applies the rest, and A applies
// nothing more. Each event is applied once overall.
func TestStandbyAppliesNothingUntilActiveStops(t *testing.T) {
	e := newEnv(t)
	solo := newCounter("solo")
	pa := &applyCounter{Projector: solo}
	pb := &applyCounter{Projector: newCounter("solo")}

	a := testRunner(e.store, e.pool, e.log, pa)
	a.LockRetry = 20 * time.Millisecond
	stopA := start(t, a)
	waitUntil(t, 5*time.Second, "runner A to become active", func() bool { return isLocal(a) })

	poolB, storeB := openStore(t, e.url)
	b := testRunner(storeB, poolB, e.log, pb)
	b.LockRetry = 20 * time.Millisecond
	start(t, b)

	// Events written through both instances, each waited for by both: B
	// learns A's progress (it is running) but applies none of it.
	var last eventstore.Position
	for i := 0; i < 10; i++ {
		last = appendEvents(t, []eventstore.Store{e.store, storeB}[i%2], 5, 3)
		if err := a.WaitFor(context.Background(), last); err != nil {
			t.Fatal(err)
		}
		if err := b.WaitFor(context.Background(), last); err != nil {
			t.Fatalf("standby WaitFor: %v", err)
		}
	}
	// Give B many more lock attempts (LockRetry 20 ms) with nothing new:
	// each is a statement of its lock session, seen starting anew in
	// pg_stat_activity.
	tries := map[time.Time]bool{}
	waitUntil(t, 10*time.Second, "fifteen more lock attempts of B", func() bool {
		var at time.Time
		err := e.pool.QueryRow(context.Background(), `SELECT query_start FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'SELECT pg_try_advisory_lock(%'`).Scan(&at)
		if err == nil {
			tries[at] = true
		}
		return len(tries) >= 15 || pb.calls.Load() > 0 // an active B tries no more
	})
	if n := pb.calls.Load(); n != 0 {
		t.Fatalf("standby runner B applied %d batches (%d events) while A held the lock", n, pb.events.Load())
	}
	if isLocal(b) {
		t.Fatal("runner B reports itself active while A holds the lock")
	}
	if !isLocal(a) || pa.events.Load() < 50 {
		t.Fatalf("runner A active=%v applied %d events, want all 50", isLocal(a), pa.events.Load())
	}
	checkExactlyOnce(t, e.pool, solo, 50)
	st, err := Status(context.Background(), e.pool, e.store, pa)
	if err != nil || !st[0].Active || st[0].Lag != 0 {
		t.Fatalf("status while A is active: %+v %v", st, err)
	}

	stopA()
	appliedByA := pa.events.Load()
	waitUntil(t, 10*time.Second, "runner B to take over", func() bool { return isLocal(b) })
	for i := 0; i < 5; i++ {
		last = appendEvents(t, []eventstore.Store{e.store, storeB}[i%2], 4, 3)
	}
	if err := b.WaitFor(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	if pb.events.Load() < 20 {
		t.Fatalf("runner B applied %d events after taking over, want at least the 20 new ones", pb.events.Load())
	}
	if got := pa.events.Load(); got != appliedByA {
		t.Fatalf("runner A applied %d events after it stopped", got-appliedByA)
	}
	if got := pa.events.Load() + pb.events.Load(); got != 70 {
		t.Fatalf("A applied %d and B %d events, want 70 in all", pa.events.Load(), pb.events.Load())
	}
	checkExactlyOnce(t, e.pool, solo, 70)
}
