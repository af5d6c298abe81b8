package projections

import (
	"context"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain/escrow"
)

// The projector may write a deadline again, at the same time, between the
// scheduler's command and its forgetting the row it took (the next
// milestone's reminder falls due with the one just sent): the row written
// again is kept, and the next claim takes it.
func TestForgetKeepsADeadlineWrittenAgain(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, Deadlines{}.Schema()); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	kind := string(escrow.MilestoneDueDeadline)
	if _, err := e.pool.Exec(ctx, upsertDeadline, "e1", kind, "m1", "test", now); err != nil {
		t.Fatal(err)
	}
	q := NewQueries(e.pool, nil)
	taken, err := q.ClaimDueDeadlines(ctx, now, time.Minute, 10)
	if err != nil || len(taken) != 1 {
		t.Fatalf("claimed %v (%v)", taken, err)
	}
	// The reminder's event names the next milestone, due at the same time.
	if _, err := e.pool.Exec(ctx, upsertDeadline, "e1", kind, "m1", "test", now); err != nil {
		t.Fatal(err)
	}
	d := taken[0]
	if err := q.ForgetDeadline(ctx, Deadline{EscrowID: d.EscrowID, Kind: d.Kind, DueAt: d.DueAt}); err != nil {
		t.Fatal(err)
	}
	again, err := q.ClaimDueDeadlines(ctx, now, time.Minute, 10)
	if err != nil || len(again) != 1 || again[0].Attempts != 1 {
		t.Fatalf("after forgetting the one taken: %+v (%v), want the one written again", again, err)
	}
	// The one taken now is forgotten.
	if err := q.ForgetDeadline(ctx, Deadline{EscrowID: "e1", Kind: escrow.MilestoneDueDeadline, DueAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := q.NextDeadlineAt(ctx); ok || err != nil {
		t.Fatalf("a deadline is left (%v)", err)
	}
}
