package webhooks

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/internal/pgtest"
)

// rowState is what a lease may change of an outbox row; xmin changes with
// any update of the row, so an equal rowState means the row was not written.
type rowState struct {
	Merchant string
	Status   string
	Attempts int
	Next     time.Time
	Lease    *time.Time
	Xmin     uint32
}

// seedDue inserts one due row per entry of merchants, in that due order
// (one millisecond apart, starting an hour ago), and returns their ids in
// the same order.
func seedDue(t *testing.T, pool *pgxpool.Pool, merchants []string) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, len(merchants))
	dues := make([]time.Time, len(merchants))
	start := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	for i := range merchants {
		ids[i] = uuid.New()
		dues[i] = start.Add(time.Duration(i) * time.Millisecond)
	}
	if _, err := pool.Exec(context.Background(), `
		INSERT INTO webhook_deliveries (id, merchant_id, environment, event, body, next_attempt_at)
		SELECT id, m, 'test', 'payment.settled', '{}'::bytea, due
		  FROM unnest($1::uuid[], $2::text[], $3::timestamptz[]) AS r(id, m, due)`, ids, merchants, dues); err != nil {
		t.Fatal(err)
	}
	return ids
}

// interleaved is k rows of each of ms, taking turns.
func interleaved(k int, ms ...string) []string {
	var out []string
	for range k {
		out = append(out, ms...)
	}
	return out
}

// outboxRows reads every row's state by id.
func outboxRows(t *testing.T, pool *pgxpool.Pool) map[uuid.UUID]rowState {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT id, merchant_id, status, attempts, next_attempt_at, lease_until, xmin::text::bigint FROM webhook_deliveries`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uuid.UUID]rowState{}
	for rows.Next() {
		var (
			id   uuid.UUID
			s    rowState
			xmin int64
		)
		if err := rows.Scan(&id, &s.Merchant, &s.Status, &s.Attempts, &s.Next, &s.Lease, &xmin); err != nil {
			t.Fatal(err)
		}
		s.Xmin = uint32(xmin)
		out[id] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkLeased: the leased rows are leased for their first attempt, from
// the lease on, and every other row is exactly as before.
func checkLeased(t *testing.T, before, after map[uuid.UUID]rowState, got []leasedAttempt, lease time.Duration, from, to time.Time) {
	t.Helper()
	picked := map[uuid.UUID]bool{}
	for _, c := range got {
		if picked[c.ID] {
			t.Fatalf("row %s leased twice in one lease", c.ID)
		}
		picked[c.ID] = true
		s := after[c.ID]
		if c.Attempt != 1 || s.Status != StatusDelivering || s.Attempts != 1 || s.Lease == nil || !s.Lease.Equal(s.Next) ||
			s.Lease.Before(from.Add(lease-time.Second)) || s.Lease.After(to.Add(lease+time.Second)) {
			t.Errorf("leased row %s: attempt %d, state %+v; want delivering, attempt 1, leased until about %s",
				c.ID, c.Attempt, s, from.Add(lease))
		}
	}
	for id, was := range before {
		if !picked[id] && after[id] != was {
			t.Errorf("row %s not leased, yet changed: %+v, was %+v", id, after[id], was)
		}
	}
}

func countByMerchant(got []leasedAttempt) map[string]int {
	out := map[string]int{}
	for _, c := range got {
		out[c.MerchantID]++
	}
	return out
}

// A lease costs the same however many merchants the dispatcher remembers:
// with 100,000 prompt and 100,000 slow merchants remembered (twice what
// setSlow keeps), it asks only about the merchants its window holds, and
// still gives each its due: PerMerchant to a prompt merchant,
// SlowPerMerchant to one never seen answering, the slow share left to the
// idle slow merchants, nothing to a slow merchant at its cap, whose rows
// stay pending and untouched.
func TestLeaseWithManyRememberedMerchants(t *testing.T) {
	pool := pgtest.NewPool(t)
	d := &Dispatcher{Pool: pool, Workers: 64, PerMerchant: 4, SlowPerMerchant: 1, SlowShare: 3}
	d.defaults()
	for i := range 100_000 {
		d.adm.prompt[fmt.Sprintf("idle-prompt-%d", i)] = true
		d.adm.slow[fmt.Sprintf("idle-slow-%d", i)] = true
	}
	d.adm.prompt["prompt"] = true
	for _, m := range []string{"slowA", "slowB", "slowC", "slowBusy"} {
		d.adm.slow[m] = true
	}
	d.adm.busy["slowBusy"] = 1 // at its cap; the share left is 3 - 1 = 2
	seedDue(t, pool, interleaved(6, "slowBusy", "prompt", "slowA", "unknown", "slowB", "slowC"))
	before := outboxRows(t, pool)

	d.mu.Lock()
	a := d.adm.allot()
	d.mu.Unlock()
	var asked []string
	rooms := func(rows map[string]int) map[string]int {
		asked = append(asked, slices.Collect(maps.Keys(rows))...)
		return a.rooms(rows)
	}
	from := time.Now()
	got, _, err := leaseDue(context.Background(), pool, 64, d.Lease, a.full, rooms)
	if err != nil {
		t.Fatal(err)
	}
	to := time.Now()

	slices.Sort(asked)
	if want := []string{"prompt", "slowA", "slowB", "slowC", "unknown"}; !slices.Equal(asked, want) {
		t.Errorf("rooms asked about %v, want only the window's merchants with room possible %v", asked, want)
	}
	n := countByMerchant(got)
	if n["prompt"] != 4 || n["unknown"] != 1 || n["slowBusy"] != 0 {
		t.Errorf("leased per merchant %v; want prompt 4 (PerMerchant), unknown 1 (SlowPerMerchant), slowBusy none", n)
	}
	if slow := n["slowA"] + n["slowB"] + n["slowC"]; slow != 2 || n["slowA"] > 1 || n["slowB"] > 1 || n["slowC"] > 1 {
		t.Errorf("leased per merchant %v; want the share left, 2, to two idle slow merchants, one each", n)
	}
	if len(got) != 7 {
		t.Errorf("leased %d rows, want 7", len(got))
	}
	after := outboxRows(t, pool)
	checkLeased(t, before, after, got, d.Lease, from, to)
	for id, s := range after {
		if s.Merchant == "slowBusy" && (s.Status != StatusPending || s.Attempts != 0) {
			t.Errorf("row %s of the full slow merchant: %+v, want pending, never attempted", id, s)
		}
	}
}

// fixedRooms gives each merchant its room in r, or def.
func fixedRooms(r map[string]int, def int) func(map[string]int) map[string]int {
	return func(rows map[string]int) map[string]int {
		out := map[string]int{}
		for m := range rows {
			if v, ok := r[m]; ok {
				out[m] = v
			} else {
				out[m] = def
			}
		}
		return out
	}
}

// Rows the lease looked at but did not lease, a merchant's past its room
// and the window's past n, are left exactly as they were: same status,
// attempts and due time, and not written at all.
func TestLeaseLeavesUnpickedRowsUntouched(t *testing.T) {
	pool := pgtest.NewPool(t)
	ids := seedDue(t, pool, append(interleaved(5, "capped"), interleaved(10, "other")...))
	before := outboxRows(t, pool)
	from := time.Now()
	var picked map[string]int
	got, starved, err := leaseDueReporting(context.Background(), pool, 4, time.Minute, []string{},
		fixedRooms(map[string]int{"capped": 2}, 3), func(p map[string]int) { picked = maps.Clone(p) })
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"capped": 2, "other": 2}; !maps.Equal(picked, want) {
		t.Fatalf("reported picks %v, want %v", picked, want)
	}
	if !starved {
		t.Fatal("not starved, though capped's room ran out with rows left")
	}
	checkLeased(t, before, outboxRows(t, pool), got, time.Minute, from, time.Now())
	var gotIDs []uuid.UUID
	for _, c := range got {
		gotIDs = append(gotIDs, c.ID)
	}
	slices.SortFunc(gotIDs, func(a, b uuid.UUID) int { return slices.Index(ids, a) - slices.Index(ids, b) })
	// In due order: capped's first two, then other's first two.
	if want := []uuid.UUID{ids[0], ids[1], ids[5], ids[6]}; !slices.Equal(gotIDs, want) {
		t.Fatalf("leased %v, want %v", gotIDs, want)
	}
}

// A merchant full from the start does not make a lease starved: its own
// attempts' ends wake the dispatcher. Only a merchant the window leaves
// out does.
func TestLeaseStarvedOnlyByTheWindow(t *testing.T) {
	pool := pgtest.NewPool(t)
	seedDue(t, pool, slices.Concat(interleaved(4, "busy"), interleaved(3, "live")))
	got, starved, err := leaseDue(context.Background(), pool, 10, time.Minute, []string{"busy"}, fixedRooms(nil, 5))
	if err != nil {
		t.Fatal(err)
	}
	if starved || len(got) != 3 {
		t.Fatalf("leased %d, starved %v; want live's 3, not starved", len(got), starved)
	}
}

// Merchants without room never hide the rows behind theirs: not those
// known full from the start, left out of every select, nor those found
// without room in the window, left out of the selects that follow, however
// many rows they have ahead of the window's size.
func TestLeaseLooksPastMerchantsWithoutRoom(t *testing.T) {
	pool := pgtest.NewPool(t)
	seedDue(t, pool, slices.Concat(interleaved(30, "busy"), interleaved(15, "shareless", "dead"), interleaved(3, "live")))
	var calls []map[string]int
	rooms := fixedRooms(map[string]int{"shareless": 0, "dead": 0}, 5)
	record := func(rows map[string]int) map[string]int {
		calls = append(calls, maps.Clone(rows))
		return rooms(rows)
	}
	// n 2: a window of 8 rows, all of the merchants without room at first.
	got, starved, err := leaseDue(context.Background(), pool, 2, time.Minute, []string{"busy"}, record)
	if err != nil {
		t.Fatal(err)
	}
	if !starved {
		t.Fatal("not starved, though merchants were left out")
	}
	if n := countByMerchant(got); len(got) != 2 || n["live"] != 2 {
		t.Fatalf("leased per merchant %v, want live's 2", n)
	}
	want := []map[string]int{{"shareless": 4, "dead": 4}, {"live": 3}}
	if len(calls) != len(want) || !maps.Equal(calls[0], want[0]) || !maps.Equal(calls[1], want[1]) {
		t.Fatalf("rooms asked %v, want %v: busy never, the others once, as the selects show them", calls, want)
	}
}

// Leases running at once never lease the same row: every row is leased
// exactly once however the leases' windows overlap.
func TestConcurrentLeasesNeverShareARow(t *testing.T) {
	pool := pgtest.NewPool(t)
	var ms []string
	for i := range 30 {
		ms = append(ms, fmt.Sprintf("m%d", i))
	}
	ids := seedDue(t, pool, interleaved(20, ms...))
	var (
		mu     sync.Mutex
		leased = map[uuid.UUID]int{}
		wg     sync.WaitGroup
	)
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for w := range 8 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				got, _, err := leaseDue(ctx, pool, 3+w, time.Hour, []string{}, fixedRooms(nil, 2))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, c := range got {
					leased[c.ID]++
				}
				mu.Unlock()
				if len(got) == 0 && pendingRows(t, pool) == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	for id, n := range leased {
		if n != 1 {
			t.Errorf("row %s leased %d times", id, n)
		}
	}
	if len(leased) != len(ids) {
		t.Errorf("%d rows leased, want all %d", len(leased), len(ids))
	}
}

func pendingRows(t *testing.T, pool *pgxpool.Pool) int {
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'`).Scan(&n); err != nil {
		t.Error(err)
	}
	return n
}

// window without a database: merchants seen without room, and those whose
// room it used up, are left out of the next select, which goes on after
// the last row seen and asks for 4n rows, at most 1,000; it is done when it
// has n rows, or a select comes back short.
func TestWindowCountsOnlyMerchantsWithRoom(t *testing.T) {
	rows := func(ms ...string) []candidate {
		var out []candidate
		for _, m := range ms {
			out = append(out, candidate{ID: uuid.New(), MerchantID: m, Seq: int64(len(out) + 1)})
		}
		return out
	}
	w := newWindow(2, []string{"busy"}, fixedRooms(map[string]int{"dead": 0}, 1))
	after, exclude, limit := w.next()
	if after != (candidate{}) || !slices.Equal(exclude, []string{"busy"}) || limit != 8 {
		t.Fatalf("first select: after %v, exclude %v, limit %d; want the start, busy, 8", after, exclude, limit)
	}
	first := rows("dead", "dead", "dead", "a", "a", "dead", "dead", "dead")
	w.add(first, limit)
	after, exclude, limit = w.next()
	if w.done() || len(w.picked) != 1 || after != first[7] || !slices.Equal(exclude, []string{"busy", "dead", "a"}) || limit != 8 {
		t.Fatalf("after a full select: done %v, picked %d, after %v, exclude %v, limit %d; want more, 1, the last row, busy, dead and a (its room used up), 8",
			w.done(), len(w.picked), after, exclude, limit)
	}
	w.add(rows("a", "b"), limit)
	if !w.done() || len(w.picked) != 2 {
		t.Fatalf("after b: done %v, picked %d; want done with 2", w.done(), len(w.picked))
	}
	w = newWindow(5, nil, fixedRooms(nil, 1))
	if _, exclude, _ := w.next(); exclude == nil {
		t.Fatal("no merchants to leave out must be an empty array, not NULL (which leaves every row out)")
	}
	w.add(rows("a"), 20)
	if !w.done() {
		t.Fatal("a short select must end the window")
	}
	if _, _, limit := newWindow(300, nil, nil).next(); limit != 1000 {
		t.Fatalf("a lease of 300: selects of %d rows, want 1,000 at most", limit)
	}
}

// A merchant whose room the window uses up hides nobody either: a receiver
// that fails at once gets its room back after every lease, and with a
// backlog of more than a select's worth of rows due ahead of everyone
// else's it would otherwise take every lease's window until that backlog
// had drained.
func TestLeaseLooksPastMerchantsWhoseRoomRunsOut(t *testing.T) {
	pool := pgtest.NewPool(t)
	ids := seedDue(t, pool, slices.Concat(interleaved(20, "backlog"), interleaved(2, "live")))
	before := outboxRows(t, pool)
	from := time.Now()
	// n 4: selects of 16 rows, the first all backlog's.
	got, _, err := leaseDue(context.Background(), pool, 4, time.Minute, []string{}, fixedRooms(map[string]int{"backlog": 2}, 5))
	if err != nil {
		t.Fatal(err)
	}
	checkLeased(t, before, outboxRows(t, pool), got, time.Minute, from, time.Now())
	gotIDs := map[uuid.UUID]bool{}
	for _, c := range got {
		gotIDs[c.ID] = true
	}
	if len(got) != 4 || !gotIDs[ids[0]] || !gotIDs[ids[1]] || !gotIDs[ids[20]] || !gotIDs[ids[21]] {
		t.Fatalf("leased per merchant %v, want backlog's first 2 (its room) and live's 2", countByMerchant(got))
	}
}

// A lease blocks on nothing another transaction holds: a row locked
// elsewhere (another dispatcher's lease in progress) is skipped at once,
// and the lease takes the rows after it.
func TestLeaseSkipsLockedRows(t *testing.T) {
	pool := pgtest.NewPool(t)
	ids := seedDue(t, pool, interleaved(3, "m"))
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM webhook_deliveries WHERE id = $1 FOR UPDATE`, ids[0]); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got, starved, err := leaseDue(cctx, pool, 3, time.Minute, []string{}, fixedRooms(nil, 3))
	if err != nil {
		t.Fatalf("lease with a row locked elsewhere: %v", err)
	}
	if starved {
		t.Fatal("starved, though every merchant had room")
	}
	if len(got) != 2 || got[0].ID == ids[0] || got[1].ID == ids[0] {
		t.Fatalf("leased %d rows (%v), want the 2 not locked elsewhere", len(got), got)
	}
}

// A lease ends its transaction whatever it picks: with nothing to lease it
// rolls back, so the rows it looked at are free again when it returns and
// its connection goes back to the pool for the next lease (one left inside
// a transaction would be closed by the pool, and every idle poll would pay
// for a new connection).
func TestLeaseEndsItsTransaction(t *testing.T) {
	pool := pgtest.NewPool(t)
	seedDue(t, pool, slices.Concat(interleaved(3, "full"), interleaved(2, "open")))
	ctx := context.Background()
	for i, rooms := range []map[string]int{{"open": 0}, {"open": 1}, {"open": 0}, {"open": 1}} {
		got, _, err := leaseDue(ctx, pool, 2, time.Minute, []string{}, fixedRooms(rooms, 0))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != rooms["open"] {
			t.Fatalf("lease %d: %d rows, want %d", i, len(got), rooms["open"])
		}
		var locked int
		if err := pool.QueryRow(ctx, `
			SELECT count(*) FROM webhook_deliveries
			 WHERE id NOT IN (SELECT id FROM webhook_deliveries FOR UPDATE SKIP LOCKED)`).Scan(&locked); err != nil {
			t.Fatal(err)
		}
		if locked != 0 {
			t.Fatalf("lease %d returned with %d rows still locked", i, locked)
		}
	}
	if n := pool.Stat().NewConnsCount(); n != 1 {
		t.Fatalf("%d connections opened for one lease after another; want 1, handed back clean each time", n)
	}
}

// A select goes on after the last row the one before it saw, not from it:
// that row, picked, is not picked again.
func TestLeaseGoesOnAfterTheLastRowSeen(t *testing.T) {
	pool := pgtest.NewPool(t)
	ids := seedDue(t, pool, slices.Concat(interleaved(7, "dead"), interleaved(3, "live")))
	// n 2: a first select of 8 rows, dead's 7 and live's first.
	got, _, err := leaseDue(context.Background(), pool, 2, time.Minute, []string{}, fixedRooms(map[string]int{"dead": 0}, 3))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID == got[1].ID || !slices.ContainsFunc(got, func(c leasedAttempt) bool { return c.ID == ids[8] }) {
		t.Fatalf("leased %v, want live's first two rows, %s and %s", got, ids[7], ids[8])
	}
}

// A lease takes exactly what one pass over the due rows in due order
// (next_attempt_at, then seq) would: each row of a merchant neither known
// full nor out of room, until n; however the rows fall into its selects,
// whatever the order of seq against due times, with rows sharing a due
// time.
func TestLeaseIsOnePassInDueOrder(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	start := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	several := 0 // rounds whose lease made more than one select
	for round := range 100 {
		if _, err := pool.Exec(ctx, `DELETE FROM webhook_deliveries`); err != nil {
			t.Fatal(err)
		}
		merchants := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
		rooms := map[string]int{}
		var full []string
		for _, m := range merchants {
			rooms[m] = max(r.IntN(5)-2, 0)
			if r.IntN(5) == 0 {
				full = append(full, m)
			}
		}
		k := 10 + r.IntN(40)
		ids, ms, dues := make([]uuid.UUID, k), make([]string, k), make([]time.Time, k)
		for i := range k {
			ids[i], ms[i] = uuid.New(), merchants[r.IntN(len(merchants))]
			dues[i] = start.Add(time.Duration(r.IntN(k/2+1)) * time.Millisecond) // seq order is not due order
		}
		if _, err := pool.Exec(ctx, `
			INSERT INTO webhook_deliveries (id, merchant_id, environment, event, body, next_attempt_at)
			SELECT id, m, 'test', 'payment.settled', '{}'::bytea, due
			  FROM unnest($1::uuid[], $2::text[], $3::timestamptz[]) AS r(id, m, due)`, ids, ms, dues); err != nil {
			t.Fatal(err)
		}
		rows, err := pool.Query(ctx, `SELECT id, merchant_id FROM webhook_deliveries ORDER BY next_attempt_at, seq`)
		if err != nil {
			t.Fatal(err)
		}
		type row struct {
			ID uuid.UUID
			M  string
		}
		ordered, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
		if err != nil {
			t.Fatal(err)
		}
		n := 1 + r.IntN(4)
		var want []uuid.UUID
		left := maps.Clone(rooms)
		for _, o := range ordered {
			if len(want) < n && !slices.Contains(full, o.M) && left[o.M] > 0 {
				left[o.M]--
				want = append(want, o.ID)
			}
		}
		selects := 0
		counted := func(rows map[string]int) map[string]int { selects++; return fixedRooms(rooms, 0)(rows) }
		got, _, err := leaseDue(ctx, pool, n, time.Minute, append([]string{}, full...), counted)
		if err != nil {
			t.Fatal(err)
		}
		if selects > 1 {
			several++
		}
		var gotIDs []uuid.UUID
		for _, c := range got {
			gotIDs = append(gotIDs, c.ID)
		}
		slices.SortFunc(gotIDs, func(a, b uuid.UUID) int {
			return slices.IndexFunc(ordered, func(o row) bool { return o.ID == a }) -
				slices.IndexFunc(ordered, func(o row) bool { return o.ID == b })
		})
		if !slices.Equal(gotIDs, want) {
			t.Fatalf("round %d (n %d, rooms %v, full %v, rows %v): leased %v, want %v", round, n, rooms, full, ordered, gotIDs, want)
		}
	}
	if several < 15 {
		t.Fatalf("only %d rounds of 100 made more than one select: the rounds do not test going on after the last row", several)
	}
}
