package projections

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/eventstore"
)

var foldBase = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// deadlineEvent is an event of escrow id as the log holds it.
func deadlineEvent(t *testing.T, id string, ev domain.Event) eventstore.RecordedEvent {
	t.Helper()
	data, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return eventstore.RecordedEvent{Stream: "escrow-" + id, Type: ev.EventType(), Data: data,
		Metadata: []byte(`{"merchantId":"m1","environment":"test"}`)}
}

// deadlineRows is the table as "escrow kind merchant environment due",
// sorted.
func deadlineRows(t *testing.T, q Querier) []string {
	t.Helper()
	rows, err := q.Query(context.Background(), `SELECT escrow_id, kind, merchant_id, environment, due_at, leased_until IS NULL, attempts
		FROM rm_escrow_deadlines ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var id, kind, m, env string
		var due time.Time
		var free bool
		var attempts int
		err := r.Scan(&id, &kind, &m, &env, &due, &free, &attempts)
		return fmt.Sprintf("%s %s %s %s +%s free=%v attempts=%d", id, kind, m, env, due.Sub(foldBase), free, attempts), err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// applyDeadlines applies events in batches of size (0: one batch) over
// the rows the table holds, as the runner would.
func applyDeadlines(t *testing.T, e *env, events []eventstore.RecordedEvent, size int) {
	t.Helper()
	if size == 0 {
		size = len(events)
	}
	for len(events) > 0 {
		n := min(size, len(events))
		if err := pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
			return Deadlines{}.Apply(context.Background(), tx, events[:n])
		}); err != nil {
			t.Fatal(err)
		}
		events = events[n:]
	}
}

// A batch leaves each deadline as its last event says: started ones with
// the merchant and environment of the escrow, ended ones gone, and an
// escrow's settlement (or milestone) ending every deadline it had before,
// the earlier rows of the table included.
func TestDeadlinesBatchKeepsWhatItsLastEventsSay(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, Deadlines{}.Schema()); err != nil {
		t.Fatal(err)
	}
	h := func(n int) time.Time { return foldBase.Add(time.Duration(n) * time.Hour) }
	for _, c := range []struct {
		name   string
		before []domain.Event // applied in a batch of their own first
		events []domain.Event
		want   []string
	}{
		{"an expiring link", nil, []domain.Event{escrow.Created{MerchantID: "m2", Environment: domain.Live, ExpiresAt: h(1)}},
			[]string{"e unpaid_expiry m2 live +1h0m0s free=true attempts=0"}},
		{"paid within the batch", nil, []domain.Event{escrow.Created{MerchantID: "m1", Environment: domain.Test, ExpiresAt: h(1)},
			escrow.Funded{ReleaseAt: h(5), RemindAt: h(4)}},
			[]string{"e auto_release m1 test +5h0m0s free=true attempts=0", "e window_ending m1 test +4h0m0s free=true attempts=0"}},
		{"paid, extended and reminded", nil, []domain.Event{escrow.Funded{ReleaseAt: h(5), RemindAt: h(4)},
			escrow.WindowExtended{ReleaseAt: h(9), RemindAt: h(8)}, escrow.Reminded{Reminder: escrow.WindowEndingDeadline}},
			[]string{"e auto_release m1 test +9h0m0s free=true attempts=0"}},
		{"settled within the batch", nil, []domain.Event{escrow.Funded{ReleaseAt: h(5), RemindAt: h(4)}, escrow.Released{}}, nil},
		{"settled in a later batch", []domain.Event{escrow.Funded{ReleaseAt: h(5), RemindAt: h(4)}}, []domain.Event{escrow.DisputeSubmitted{}}, nil},
		{"nothing of its deadlines in the batch", []domain.Event{escrow.Funded{ReleaseAt: h(5), MilestoneDueAt: h(2)}},
			[]domain.Event{escrow.Edited{}}, []string{"e auto_release m1 test +5h0m0s free=false attempts=1", "e milestone_due m1 test +2h0m0s free=false attempts=1"}},
		{"a milestone confirmed ends the rest", []domain.Event{escrow.Funded{ReleaseAt: h(5), MilestoneDueAt: h(2)}},
			[]domain.Event{escrow.Reminded{Reminder: escrow.MilestoneDueDeadline, NextDueAt: h(3)}, escrow.MilestoneConfirmed{MilestoneDueAt: h(7)}},
			[]string{"e milestone_due m1 test +7h0m0s free=true attempts=0"}},
		{"started again after its escrow's settlement", nil, []domain.Event{escrow.Funded{ReleaseAt: h(5)}, escrow.Deleted{},
			escrow.WindowExtended{ReleaseAt: h(6)}},
			[]string{"e auto_release m1 test +6h0m0s free=true attempts=0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := e.pool.Exec(ctx, `TRUNCATE rm_escrow_deadlines`); err != nil {
				t.Fatal(err)
			}
			var before, events []eventstore.RecordedEvent
			for _, ev := range c.before {
				before = append(before, deadlineEvent(t, "e", ev))
			}
			for _, ev := range c.events {
				events = append(events, deadlineEvent(t, "e", ev))
			}
			applyDeadlines(t, e, before, 0)
			// The scheduler has taken the earlier rows: a row the batch
			// starts again starts without its lease.
			if _, err := e.pool.Exec(ctx, `UPDATE rm_escrow_deadlines SET leased_until = now(), attempts = 1`); err != nil {
				t.Fatal(err)
			}
			applyDeadlines(t, e, events, 0)
			got := deadlineRows(t, e.pool)
			if c.want == nil {
				c.want = []string{}
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("rows %q\nwant %q", got, c.want)
			}
		})
	}
}

// However the log's events fall into batches, the table ends the same as
// when each is applied alone: random histories of a few escrows, applied
// event by event and in batches of every size.
func TestDeadlinesBatchesLeaveWhatEventsAloneLeave(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, Deadlines{}.Schema()); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	at := func() time.Time {
		if rng.IntN(4) == 0 {
			return time.Time{}
		}
		return foldBase.Add(time.Duration(rng.IntN(100)) * time.Minute)
	}
	kinds := []escrow.DeadlineKind{escrow.ExpiryDeadline, escrow.AutoReleaseDeadline, escrow.WindowEndingDeadline, escrow.MilestoneDueDeadline}
	random := func() domain.Event {
		switch rng.IntN(9) {
		case 0:
			return escrow.Created{MerchantID: "m1", Environment: domain.Test, ExpiresAt: at()}
		case 1, 2:
			return escrow.Funded{ReleaseAt: at(), RemindAt: at(), MilestoneDueAt: at()}
		case 3:
			return escrow.WindowExtended{ReleaseAt: at(), RemindAt: at()}
		case 4, 5:
			return escrow.Reminded{Reminder: kinds[rng.IntN(len(kinds))], NextDueAt: at()}
		case 6:
			return escrow.MilestoneConfirmed{MilestoneDueAt: at()}
		case 7:
			return escrow.Released{}
		default:
			return escrow.DisputeResolved{}
		}
	}
	for round := range 40 {
		var events []eventstore.RecordedEvent
		for range 12 {
			events = append(events, deadlineEvent(t, fmt.Sprintf("e%d", rng.IntN(3)), random()))
		}
		var alone []string
		for _, size := range []int{1, 0, 2, 3, 5} {
			if _, err := e.pool.Exec(ctx, `TRUNCATE rm_escrow_deadlines`); err != nil {
				t.Fatal(err)
			}
			applyDeadlines(t, e, events, size)
			got := deadlineRows(t, e.pool)
			if size == 1 {
				alone = got
				continue
			}
			if !slices.Equal(got, alone) {
				t.Fatalf("round %d, batches of %d: rows %q\nevent by event %q", round, size, got, alone)
			}
		}
	}
}
