package projections

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"
)

// Acting on deadlines costs what is due, not what is pending: with 100,000
// pending deadlines of which 30 are due, a claim reads about the 30 rows
// due (the plan's scans, measured with EXPLAIN ANALYZE, read through the
// index on due_at) and takes exactly them, earliest first; a claim when
// none is due reads next to nothing.
func TestClaimDueDeadlinesReadsOnlyTheDue(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, Deadlines{}.Schema()); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	const pending, due = 100_000, 30
	// Rows 1..30 fell due over the last 30 minutes; the rest fall due over
	// the coming months.
	if _, err := e.pool.Exec(ctx, `
		INSERT INTO rm_escrow_deadlines (escrow_id, kind, merchant_id, environment, due_at)
		SELECT 'e' || i, CASE WHEN i % 2 = 0 THEN 'auto_release' ELSE 'window_ending' END, 'm' || (i % 40), 'test',
			CASE WHEN i <= $2 THEN $1::timestamptz - make_interval(mins => $2 + 1 - i)
			     ELSE $1::timestamptz + make_interval(mins => i) END
		FROM generate_series(1, $3) i`, now, due, pending); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `ANALYZE rm_escrow_deadlines`); err != nil {
		t.Fatal(err)
	}
	q := NewQueries(e.pool, nil)

	// The plan of the claim's selection (the UPDATE's own plan is the same
	// scan under a join on the primary key).
	read := func(at time.Time) float64 {
		t.Helper()
		var doc string
		if err := e.pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) SELECT escrow_id, kind FROM rm_escrow_deadlines
			WHERE due_at <= $1 AND (leased_until IS NULL OR leased_until <= $1)
			ORDER BY due_at LIMIT 100 FOR UPDATE SKIP LOCKED`, at).Scan(&doc); err != nil {
			t.Fatal(err)
		}
		var plan []map[string]any
		if err := json.Unmarshal([]byte(doc), &plan); err != nil {
			t.Fatal(err)
		}
		return planRows(plan[0]["Plan"].(map[string]any))
	}
	if n := read(now); n > 2*due {
		t.Fatalf("the claim's scan reads %v rows for %d due among %d", n, due, pending)
	}
	got, err := q.ClaimDueDeadlines(ctx, now, time.Minute, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != due {
		t.Fatalf("claimed %d, want the %d due", len(got), due)
	}
	for i, d := range got {
		if d.EscrowID != "e"+strconv.Itoa(i+1) || d.DueAt.After(now) || d.Attempts != 1 {
			t.Fatalf("claim %d: %+v, want e%d, due, first attempt", i, d, i+1)
		}
	}
	// Leased: a second process asking at once takes none of them.
	if again, err := q.ClaimDueDeadlines(ctx, now, time.Minute, 100); err != nil || len(again) != 0 {
		t.Fatalf("second claim took %d (%v)", len(again), err)
	}
	if n := read(now.Add(-time.Hour)); n > 2 {
		t.Fatalf("a claim with nothing due reads %v rows", n)
	}
	// After the lease the same deadlines are taken again (their command
	// failed), counted as a second attempt; a forgotten one is not.
	if err := q.ForgetDeadline(ctx, Deadline{EscrowID: got[0].EscrowID, Kind: got[0].Kind, DueAt: got[0].DueAt}); err != nil {
		t.Fatal(err)
	}
	retry, err := q.ClaimDueDeadlines(ctx, now.Add(time.Minute), time.Minute, 100)
	if err != nil || len(retry) != due-1 || retry[0].EscrowID != "e2" || retry[0].Attempts != 2 {
		t.Fatalf("after the lease: %d claimed (%v), first %+v", len(retry), err, retry)
	}
}
