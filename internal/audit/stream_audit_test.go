package audit_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/audit"
)

// auditPaged audits m reading and folding pageSize events at a time.
func (e *env) auditPaged(m string, pageSize int) audit.Report {
	e.t.Helper()
	e.mu.Lock()
	at := e.last
	e.mu.Unlock()
	rep, err := audit.RunWith(e.ctx, e.store, e.pool, m, audit.Options{At: at, PageSize: pageSize})
	if err != nil {
		e.t.Fatal(err)
	}
	return rep
}

// auditHoldingNothing is auditPaged with no record held between pages.
func (e *env) auditHoldingNothing(m string, pageSize int) audit.Report {
	e.t.Helper()
	defer audit.HoldNoRecords()()
	return e.auditPaged(m, pageSize)
}

// The audit streams: it folds the merchant's events a page at a time and
// keeps the records it has seen in a table, not in memory. Whatever the
// page size (one event: every record's versions in different pages), and
// whether it holds the records still changing or writes and reads them
// back after every page, the report is the same, difference for difference and in the same order, on
// a clean log and on read models and a log corrupted in every way the
// audit checks: a record changed after it settled (its first version
// pages before), records missing, changed and invented in the read model,
// a balance off, commission charged twice, in both environments.
func TestAuditPagedEqualsWhole(t *testing.T) {
	e := newEnv(t)
	m := e.merchant("Shop")
	test, live := actor(m, domain.Test), actor(m, domain.Live)
	a := e.customer(test, "a@x.co", "08031110001")
	b := e.customer(test, "b@x.co", "08031110002")
	d := e.customer(live, "d@x.co", "08031110004")
	top := e.topUp(test, a, 10000)
	e.topUp(test, b, 5000)
	var recs []ledger.Record
	for i, ref := range []string{"dep-1", "dep-2", "dep-3"} {
		recs = append(recs, e.pay(test, []string{a, b, a}[i], app.IntentRequest{Reference: ref, Type: ledger.Deposit, Amount: money.Naira(100 + int64(i))}))
	}
	paid := e.pay(test, a, withdrawal("wd-1", 300, nuban(t, "058", "12", false)))
	live1 := e.pay(live, d, app.IntentRequest{Reference: "dep-live", Type: ledger.Deposit, Amount: money.Naira(700)})

	whole := e.audit(m)
	expectClean(t, whole)
	for _, size := range []int{1, 2, 7} {
		if got := e.auditPaged(m, size); !reflect.DeepEqual(got, whole) {
			t.Fatalf("page size %d:\n%+v\nwhole:\n%+v", size, got, whole)
		}
		if got := e.auditHoldingNothing(m, size); !reflect.DeepEqual(got, whole) {
			t.Fatalf("page size %d, no record held:\n%+v\nwhole:\n%+v", size, got, whole)
		}
	}

	// The log: the top-up, long settled, comes back failed; commission
	// twice for one escrow.
	changed := top
	changed.Status = ledger.Failed
	pChanged := e.appendRaw("payment-forged-1", payment.PayoutCompleted{Record: changed}, m)
	// Charging esc-1 twice in one record is charging it once.
	commission := func(id string) ledger.Record { return commissionRecord(m, id, top.CreatedAt, "esc-1", "esc-1") }
	e.appendRaw("payment-forged-2", payment.Settled{Records: []ledger.Record{commission("com-1")}}, m)
	e.appendRaw("payment-forged-3", payment.Settled{Records: []ledger.Record{commission("com-2")}}, m)
	// The read models, after the audit caught them up.
	e.audit(m)
	e.exec(`DELETE FROM rm_transactions WHERE id = $1`, recs[1].ID)
	e.exec(`UPDATE rm_transactions SET record = jsonb_set(record::jsonb, '{amount}', '3001')::json WHERE id = $1`, paid.ID)
	e.exec(`UPDATE rm_transactions SET status = 'failed' WHERE id = $1`, live1.ID)
	for _, g := range []struct{ id, env string }{{"a-ghost", "test"}, {"z-ghost", "live"}} {
		e.exec(`INSERT INTO rm_transactions (id, merchant_id, environment, reference, transaction_type, status, record, created_at)
			VALUES ($2, $1, $3, 'ghost', 'deposit', 'success', '{}', now())`, m, g.id, g.env)
	}
	e.exec(`UPDATE rm_balances SET balance = balance + 1 WHERE merchant_id = $1 AND holder_id = $2 AND bucket = 'main'`, m, b)

	whole = e.audit(m)
	want := []string{
		"settled_once record " + top.ID + " status at " + pChanged.String() + ": expected success, found failed (settled at " + recordSettledAt(t, e, top.ID).String() + ")",
		"commission test escrow esc-1: expected 1 commission record, found 2 (com-1, com-2)",
		"balance test customer:" + b + ":main: expected 5101, found 5101.01",
		"record test record " + recs[1].ID + ": expected a row (success), found no row",
		"record test record " + paid.ID + " amount: expected 300, found 3001",
		"record live record " + live1.ID + " column status: expected success, found failed",
		"record test record a-ghost: expected no row, found a row (success) (no such record in the event log)",
		"record live record z-ghost: expected no row, found a row (success) (no such record in the event log)",
	}
	var got []string
	for _, d := range whole.Differences {
		got = append(got, d.String())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("differences, in report order:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, size := range []int{1, 3} {
		if got := e.auditPaged(m, size); !reflect.DeepEqual(got, whole) {
			t.Fatalf("page size %d:\n%+v\nwhole:\n%+v", size, got.Differences, whole.Differences)
		}
		if got := e.auditHoldingNothing(m, size); !reflect.DeepEqual(got, whole) {
			t.Fatalf("page size %d, no record held:\n%+v\nwhole:\n%+v", size, got.Differences, whole.Differences)
		}
	}
}

// An audit whose context ends during the replay fails: a replay cut short
// never passes for a clean one.
func TestAuditCancelledFails(t *testing.T) {
	e := newEnv(t)
	m := e.merchant("Shop")
	test := actor(m, domain.Test)
	a := e.customer(test, "a@x.co", "08031110001")
	e.topUp(test, a, 1000)
	e.pay(test, a, app.IntentRequest{Reference: "dep-1", Type: ledger.Deposit, Amount: money.Naira(100)})
	expectClean(t, e.audit(m))
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	rep, err := audit.RunWith(ctx, e.store, e.pool, m, audit.Options{PageSize: 1, Progress: func(done, _ int64) {
		if done == 2 {
			cancel()
		}
	}})
	if err == nil {
		t.Fatalf("a cancelled audit returned no error: %+v", rep)
	}
}

// The progress report's total is the merchant's events (both
// environments), known before the replay starts: the audit trail's count,
// which equals what the replay reads once the log is quiet.
func TestAuditProgressKnowsTheTotal(t *testing.T) {
	e := newEnv(t)
	m := e.merchant("Shop")
	other := e.merchant("Other")
	test := actor(m, domain.Test)
	c := e.customer(test, "a@x.co", "08031110001")
	e.topUp(test, c, 1000)
	e.pay(test, c, app.IntentRequest{Reference: "dep-1", Type: ledger.Deposit, Amount: money.Naira(100)})
	e.customer(actor(m, domain.Live), "b@x.co", "08031110003")
	o := actor(other, domain.Test)
	e.topUp(o, e.customer(o, "o@x.co", "08031110002"), 5000)
	var (
		calls       int
		first, last [2]int64
	)
	rep, err := audit.RunWith(e.ctx, e.store, e.pool, m, audit.Options{PageSize: 2, Progress: func(done, total int64) {
		if calls == 0 {
			first = [2]int64{done, total}
		}
		calls++
		last = [2]int64{done, total}
	}})
	if err != nil {
		t.Fatal(err)
	}
	expectClean(t, rep)
	if rep.Events < 6 || calls < 3 {
		t.Fatalf("%d events in %d reports: too few to see progress", rep.Events, calls)
	}
	if first[1] != rep.Events || last != [2]int64{rep.Events, rep.Events} {
		t.Fatalf("progress: first %v, last %v; want a total of %d from the first report to the last", first, last, rep.Events)
	}
}
