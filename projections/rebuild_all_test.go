package projections

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/category"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/whitelist"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
)

// phones numbers the workload's customers.
var phones atomic.Int64

// mixedWorkload runs round rounds of what a merchant's traffic does to
// every read model: customers created, edited, blocked and their
// permissions changed, top-ups,
// escrows created and paid and confirmed, disputed and resolved, edited
// and deleted, categories created, moved and deleted, whitelisted
// addresses added and removed. It returns the last write's position.
func mixedWorkload(t *testing.T, svc *app.Service, a app.Actor, tag string, rounds int) eventstore.Position {
	t.Helper()
	ctx := context.Background()
	var last eventstore.Position
	note := func(p eventstore.Position, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if last.Less(p) {
			last = p
		}
	}
	for r := range rounds {
		var cs [3]string
		for i := range cs {
			id, pos, err := svc.CreateCustomer(ctx, a, customer.NewCustomer{Firstname: "Ada", Lastname: "Obi",
				Email: fmt.Sprintf("%s%d-%d@x.co", tag, r, i), Phone: fmt.Sprintf("0803%07d", phones.Add(1))})
			note(pos, err)
			cs[i] = id
		}
		seller, buyer, other := cs[0], cs[1], cs[2]
		// Money moves only in the test environment (top-ups).
		funded := a.Environment == domain.Test
		if funded {
			_, pos, err := svc.TopUp(ctx, a, buyer, money.Naira(50000))
			note(pos, err)
		}
		name := "Renamed"
		note(svc.UpdateCustomer(ctx, a, other, customer.Update{Firstname: &name}))
		note(svc.SetBlocked(ctx, a, other, r%2 == 0, "review"))
		no := false
		note(svc.SetPermissions(ctx, a, other, nil, &no, nil))
		catID, pos, err := svc.CreateCategory(ctx, a, category.New{Name: fmt.Sprintf("%s cat %d", tag, r)}, 0)
		note(pos, err)
		cat2, pos, err := svc.CreateCategory(ctx, a, category.New{Name: fmt.Sprintf("%s cat %d b", tag, r)}, 0)
		note(pos, err)
		note(svc.MoveCategory(ctx, a, catID, 1))
		addr, pos, err := svc.AddWhitelistAddress(ctx, a, buyer, whitelist.NewAddress{
			WalletAddress: fmt.Sprintf("0x%040x", r*10+len(tag)), Network: "BSC", Label: "cold"})
		note(pos, err)
		if r%2 == 1 {
			_, pos, err = svc.RemoveWhitelistAddress(ctx, a, buyer, addr.ID)
			note(pos, err)
		}
		var ids []string
		for k := range 4 {
			res, err := svc.CreateEscrow(ctx, a, seller, escrow.Draft{Amount: money.Naira(1000 * int64(k+1)),
				Purpose: "Phone", WhoPays: string(escrow.Buyer), CategoryID: cat2})
			note(res.Position, err)
			ids = append(ids, res.Escrow.ID)
		}
		if funded {
			settle(t, svc, a, buyer, seller, tag, r, ids, note)
		}
		note(svc.DeleteEscrow(ctx, a, seller, ids[3]))
		note(svc.DeleteCategory(ctx, a, catID))
	}
	return last
}

// settle pays three of the escrows ids, confirms the first and has the
// second disputed and refunded.
func settle(t *testing.T, svc *app.Service, a app.Actor, buyer, seller, tag string, r int, ids []string, note func(eventstore.Position, error)) {
	t.Helper()
	ctx := context.Background()
	perms := customer.Permissions{CanBuy: true, CanSell: true, CanWithdraw: true}
	for k, id := range ids[:3] {
		e, _, err := app.Load(ctx, svc.Engine, app.EscrowKind, id)
		if err != nil {
			t.Fatal(err)
		}
		pay, err := svc.PayEscrows(ctx, a, buyer, perms, app.EscrowPayment{Reference: fmt.Sprintf("%s-%d-%d", tag, r, k),
			Amount: e.Due(), EscrowIDs: []string{id}})
		note(pay.Position, err)
	}
	res, err := svc.ConfirmEscrow(ctx, a, buyer, ids[0])
	note(res.Position, err)
	res, err = svc.SubmitDispute(ctx, a, buyer, ids[1], "not delivered", "")
	note(res.Position, err)
	res, err = svc.ResolveDispute(ctx, a, ids[1], escrow.Resolution{Status: "REFUNDED", MerchantName: "Shop"})
	note(res.Position, err)
}

// dumpReadModels renders every table of ps as text, rows in a stable
// order. A bigserial seq column is shown as its rank: a sequence also
// advances for an upsert that updates, so its values depend on how the
// events were batched, but its order (the listings') must not.
func dumpReadModels(t *testing.T, e *env, ps []Projector) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, p := range ps {
		for _, table := range p.Tables() {
			rows, err := e.pool.Query(ctx, `SELECT column_name FROM information_schema.columns
				WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position`, table)
			if err != nil {
				t.Fatal(err)
			}
			var cols []string
			for rows.Next() {
				var c string
				if err := rows.Scan(&c); err != nil {
					t.Fatal(err)
				}
				if c == "seq" {
					c = "rank() OVER (ORDER BY seq) AS seq"
				} else {
					c = `"` + c + `"`
				}
				cols = append(cols, c)
			}
			rows.Close()
			if len(cols) == 0 {
				t.Fatalf("table %s of %s has no columns", table, p.Name())
			}
			var doc string
			q := `SELECT coalesce(string_agg(r::text, E'\n' ORDER BY r::text), '') FROM (SELECT ` + strings.Join(cols, ", ") + ` FROM ` + table + `) r`
			if err := e.pool.QueryRow(ctx, q).Scan(&doc); err != nil {
				t.Fatalf("%s: %v", table, err)
			}
			out[p.Name()+"."+table] = doc
		}
	}
	return out
}

func compareDumps(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	for k, w := range want {
		if got[k] != w {
			wl, gl := strings.Split(w, "\n"), strings.Split(got[k], "\n")
			for i := range max(len(wl), len(gl)) {
				var a, b string
				if i < len(wl) {
					a = wl[i]
				}
				if i < len(gl) {
					b = gl[i]
				}
				if a != b {
					t.Errorf("%s: %s differs (%d rows, want %d) at row %d:\nwant %s\ngot  %s", what, k, len(gl), len(wl), i, a, b)
					break
				}
			}
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d tables, want %d", what, len(got), len(want))
	}
}

// RebuildAll of every read model, from one pass over the log, gives the
// very rows the live projectors wrote after a mixed workload; and a
// rebuild while writers append and the live runner projects ends, once
// the runner has caught up, with the rows a quiet rebuild gives.
func TestRebuildAllEqualsLiveProjectors(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	ps := All(nil)
	svc, a := e.service(t)
	live := a
	live.Environment = domain.Live
	r := testRunner(e.store, e.pool, e.log, ps...)
	start(t, r)
	last := mixedWorkload(t, svc, a, "t", 3)
	if p := mixedWorkload(t, svc, live, "l", 2); last.Less(p) {
		last = p
	}
	if err := r.WaitFor(ctx, last); err != nil {
		t.Fatal(err)
	}
	byLive := dumpReadModels(t, e, ps)
	if n := count(t, e.pool, `SELECT count(*) FROM rm_escrows`); n != 20 {
		t.Fatalf("%d escrows projected, want 20", n)
	}

	var calls int
	var lastDone, lastTotal int64
	if err := RebuildAll(ctx, e.pool, e.store, All(nil), e.log, func(done, total int64) {
		calls++
		if done < lastDone || done > total {
			t.Errorf("progress %d of %d after %d", done, total, lastDone)
		}
		lastDone, lastTotal = done, total
	}); err != nil {
		t.Fatal(err)
	}
	head, err := e.store.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := countEvents(ctx, e.store, eventstore.Start, head, 0); err != nil || lastDone != n || lastTotal != n || calls < 2 {
		t.Fatalf("progress ended at %d of %d after %d calls; the log has %d (%v)", lastDone, lastTotal, calls, n, err)
	}
	compareDumps(t, "quiet rebuild", byLive, dumpReadModels(t, e, ps))
	for _, p := range ps {
		if got := checkpointOf(t, e.pool, p.Name()); got != head {
			t.Errorf("%s checkpoint %s after the rebuild, want %s", p.Name(), got, head)
		}
	}

	// Again, with writers appending throughout.
	var (
		wg      sync.WaitGroup
		written eventstore.Position
		stop    = make(chan struct{})
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			written = mixedWorkload(t, svc, a, fmt.Sprintf("w%d", i), 1)
		}
	}()
	err = RebuildAll(ctx, e.pool, e.store, All(nil), e.log, nil)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.WaitFor(ctx, written); err != nil {
		t.Fatal(err)
	}
	busy := dumpReadModels(t, e, ps)
	if err := RebuildAll(ctx, e.pool, e.store, All(nil), e.log, nil); err != nil {
		t.Fatal(err)
	}
	compareDumps(t, "rebuild under writes", dumpReadModels(t, e, ps), busy)

	// Again in small pages, the fills holding no row (rows are written
	// and met again, read back and updated, all the time) or two (a full
	// hold writes only the rows the last page did not touch).
	defer func(page, hold int) { rebuildPage, fillHold = page, hold }(rebuildPage, fillHold)
	for _, c := range []struct{ page, hold int }{{3, 0}, {5, 2}} {
		rebuildPage, fillHold = c.page, c.hold
		if err := RebuildAll(ctx, e.pool, e.store, All(nil), e.log, nil); err != nil {
			t.Fatal(err)
		}
		compareDumps(t, fmt.Sprintf("rebuild in pages of %d holding %d rows", c.page, c.hold), busy, dumpReadModels(t, e, ps))
	}
	if n := count(t, e.pool, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'rebuild\_%'`); n != 0 {
		t.Fatalf("%d shadow schemas left behind", n)
	}
}

// failingRead fails the failAt-th ReadAll of the store, only that one.
type failingRead struct {
	eventstore.Store
	calls, failAt atomic.Int64
}

func (f *failingRead) ReadAll(ctx context.Context, after eventstore.Position, limit int) ([]eventstore.RecordedEvent, error) {
	if f.calls.Add(1) == f.failAt.Load() {
		return nil, errors.New("read failed")
	}
	return f.Store.ReadAll(ctx, after, limit)
}

// A rebuild whose reading of the log fails swaps nothing in (the live
// tables and checkpoints stay as they were) and leaves no shadow.
func TestRebuildAllReadFailureSwapsNothing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	a, b := newCounter("ra"), newCounter("rb2")
	head := visible(t, e.store, appendBulk(t, e.store, 12000, 4))
	if err := CatchUpTo(ctx, e.store, e.pool, nil, head, a, b); err != nil {
		t.Fatal(err)
	}
	oid := func(table string) uint32 {
		var o uint32
		if err := e.pool.QueryRow(ctx, `SELECT $1::regclass::oid`, table).Scan(&o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	before := []uint32{oid("ra_counts"), oid("rb2_counts")}
	store := &failingRead{Store: e.store}
	store.failAt.Store(3) // the count reads nothing: the third page of the log
	if err := RebuildAll(ctx, e.pool, store, []Projector{a, b}, nil, nil); err == nil || !strings.Contains(err.Error(), "read failed") {
		t.Fatalf("rebuild: %v", err)
	}
	if after := []uint32{oid("ra_counts"), oid("rb2_counts")}; !reflect.DeepEqual(after, before) {
		t.Fatalf("tables swapped in after a failed read: %v, were %v", after, before)
	}
	for _, c := range []*countProjector{a, b} {
		if got := checkpointOf(t, e.pool, c.name); got != head {
			t.Fatalf("%s checkpoint moved to %s", c.name, got)
		}
		checkExactlyOnce(t, e.pool, c, 12000)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'rebuild\_%'`); n != 0 {
		t.Fatalf("%d shadow schemas left behind", n)
	}
}
