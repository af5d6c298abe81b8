package audit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/domaintest"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/domain/wallet"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/audit"
	"github.com/escrowd/escrowd/internal/gateway"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/internal/projector"
	"github.com/escrowd/escrowd/projections"
)

var allowed = customer.Permissions{CanBuy: true, CanSell: true, CanWithdraw: true}

type env struct {
	t     *testing.T
	ctx   context.Context
	pool  *pgxpool.Pool
	store eventstore.Store
	svc   *app.Service

	mu   sync.Mutex
	last eventstore.Position // the latest write: audits must cover it
}

// wrote notes a write's position.
func (e *env) wrote(p eventstore.Position) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.last.Less(p) {
		e.last = p
	}
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pool := pgtest.NewPool(t)
	store := postgres.New(pool)
	t.Cleanup(store.Close)
	svc := app.NewService(app.NewEngine(store, 1000))
	svc.Gateways[domain.Live] = gateway.Test() // live movements too
	return &env{t: t, ctx: context.Background(), pool: pool, store: store, svc: svc}
}

func (e *env) merchant(name string) string {
	e.t.Helper()
	m, err := e.svc.CreateMerchant(e.ctx, name, true, "NG", func(k string) string { return "d-" + k })
	if err != nil {
		e.t.Fatal(err)
	}
	e.wrote(m.Position)
	return m.MerchantID
}

func actor(merchantID string, env domain.Environment) app.Actor {
	return app.Actor{MerchantID: merchantID, Environment: env, KeyID: "k"}
}

func (e *env) customer(a app.Actor, email, phone string) string {
	e.t.Helper()
	id, pos, err := e.svc.CreateCustomer(e.ctx, a, customer.NewCustomer{Firstname: "Ada", Lastname: "Obi", Email: email, Phone: phone})
	if err != nil {
		e.t.Fatal(err)
	}
	e.wrote(pos)
	return id
}

func (e *env) topUp(a app.Actor, cid string, naira int64) ledger.Record {
	e.t.Helper()
	rec, pos, err := e.svc.TopUp(e.ctx, a, cid, money.Naira(naira))
	if err != nil {
		e.t.Fatal(err)
	}
	e.wrote(pos)
	return rec
}

// pay stages and verifies an intent, returning the settled record; an
// intent whose reference starts with "staged-" is only staged.
func (e *env) pay(a app.Actor, cid string, in app.IntentRequest) ledger.Record {
	e.t.Helper()
	staged, err := e.svc.CreateIntent(e.ctx, a, cid, allowed, in)
	if err != nil {
		e.t.Fatalf("create-intent %s: %v", in.Reference, err)
	}
	e.wrote(staged.Position)
	if strings.HasPrefix(in.Reference, "staged-") {
		return staged.Record
	}
	rec, pos, err := e.svc.Verify(e.ctx, a, cid, allowed, in.Reference)
	if err != nil {
		e.t.Fatalf("verify %s: %v", in.Reference, err)
	}
	e.wrote(pos)
	return rec
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	tag, err := e.pool.Exec(e.ctx, sql, args...)
	if err != nil {
		e.t.Fatal(err)
	}
	if tag.RowsAffected() != 1 {
		e.t.Fatalf("%s: %d rows", sql, tag.RowsAffected())
	}
}

func (e *env) audit(merchantID string) audit.Report {
	e.t.Helper()
	e.mu.Lock()
	at := e.last
	e.mu.Unlock()
	rep, err := audit.RunWith(e.ctx, e.store, e.pool, merchantID, audit.Options{At: at})
	if err != nil {
		e.t.Fatal(err)
	}
	return rep
}

// restore rebuilds the ledger read model from the log, undoing a corruption.
func (e *env) restore() {
	e.t.Helper()
	if err := projections.Rebuild(e.ctx, e.pool, e.store, projections.Ledger{}, nil, nil); err != nil {
		e.t.Fatal(err)
	}
}

// appendRaw writes an event straight to the store, bypassing every rule.
func (e *env) appendRaw(stream string, ev domain.Event, merchantID string) eventstore.Position {
	e.t.Helper()
	data, err := json.Marshal(ev)
	if err != nil {
		e.t.Fatal(err)
	}
	meta, _ := json.Marshal(domain.Meta{MerchantID: merchantID, Environment: domain.Test, Actor: "forger"})
	res, err := e.store.Append(e.ctx, eventstore.StreamAppend{Stream: stream, Expected: eventstore.Any,
		Events: []eventstore.EventData{{ID: uuid.New(), Type: ev.EventType(), Data: data, Metadata: meta}}})
	if err != nil {
		e.t.Fatal(err)
	}
	e.wrote(res.Position)
	return res.Position
}

// nuban is domaintest.NUBAN (kept short: the tests use it a lot).
var nuban = domaintest.NUBAN

func withdrawal(ref string, naira int64, account string) app.IntentRequest {
	return app.IntentRequest{Reference: ref, Type: ledger.Withdrawal, Amount: money.Naira(naira),
		Withdrawal: &ledger.WithdrawalDetails{AccountNumber: account, BankCode: "058", Narration: "rent"}}
}

// lines renders a report's differences, sorted.
func lines(rep audit.Report) []string {
	var out []string
	for _, d := range rep.Differences {
		out = append(out, d.String())
	}
	sort.Strings(out)
	return out
}

func expectClean(t *testing.T, rep audit.Report) {
	t.Helper()
	if !rep.Clean() {
		t.Fatalf("audit of %s not clean:\n%s", rep.MerchantID, strings.Join(lines(rep), "\n"))
	}
}

func expectLines(t *testing.T, rep audit.Report, want ...string) {
	t.Helper()
	sort.Strings(want)
	if got := lines(rep); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("differences:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestAuditMixedWorkloadAndCorruptedReadModels(t *testing.T) {
	e := newEnv(t)
	m, other := e.merchant("Shop"), e.merchant("Other")
	test, live := actor(m, domain.Test), actor(m, domain.Live)

	a := e.customer(test, "a@x.co", "08031110001")
	b := e.customer(test, "b@x.co", "08031110002")
	c := e.customer(test, "c@x.co", "08031110003")
	d := e.customer(live, "d@x.co", "08031110004")
	e.topUp(test, a, 10000)
	e.topUp(test, b, 5000)
	e.pay(test, c, app.IntentRequest{Reference: "dep-1", Type: ledger.Deposit, Amount: 250050})
	transfer := e.pay(test, a, app.IntentRequest{Reference: "wt-1", Type: ledger.WalletTransfer, Amount: 120025,
		Wallet: &ledger.WalletDetails{Phone: "08031110002", Narration: "lunch"}})
	paid := e.pay(test, a, withdrawal("wd-1", 3000, nuban(t, "058", "12", false)))
	reversed := e.pay(test, b, withdrawal("wd-2", 1000, nuban(t, "058", "34", true)))
	e.pay(live, d, app.IntentRequest{Reference: "dep-live", Type: ledger.Deposit, Amount: money.Naira(700)})
	// A "staged-" reference is only staged: its record stays pending.
	e.pay(test, c, app.IntentRequest{Reference: "staged-dep", Type: ledger.Deposit, Amount: money.Naira(100)})
	if paid.Status != ledger.Success || reversed.Status != ledger.Reversed || transfer.Status != ledger.Success {
		t.Fatalf("workload: withdrawal %s, reversal %s, transfer %s", paid.Status, reversed.Status, transfer.Status)
	}

	// The other merchant's traffic, whose read models get corrupted too:
	// none of it may show in m's report.
	otherTest := actor(other, domain.Test)
	x := e.customer(otherTest, "x@x.co", "08031110009")
	e.topUp(otherTest, x, 4000)
	e.pay(otherTest, x, withdrawal("wd-x", 500, nuban(t, "058", "56", false)))

	// No projector has run: the audit catches the read models up itself
	// rather than reporting their lag.
	full, stop := audit.ComparedInFull()
	defer stop()
	rep := e.audit(m)
	expectClean(t, rep)
	// The replay's digests (recordDigest, in Go) equal the rows' (in
	// PostgreSQL): no record is read again to be compared in full.
	if len(*full) != 0 {
		t.Fatalf("a clean read model had records compared in full: %v", *full)
	}
	// Movements: 2 top-ups, 2 deposits, 1 transfer, 2 payouts, 1 reversal.
	// Records: those 7 payments, the transfer's receiving side, 1 pending.
	// Accounts: test a, b, c main, clearing, platform revenue; live d, clearing.
	if rep.Movements != 8 || rep.Records != 9 || rep.Accounts != 7 || rep.Wallets != 4 || rep.Entries == 0 || rep.Events <= rep.Entries {
		t.Fatalf("report counts %+v", rep)
	}

	e.exec(`UPDATE rm_balances SET balance = balance + 1 WHERE merchant_id = $1 AND holder_id = $2 AND bucket = 'main'`, other, x)
	e.appendRaw(app.WalletKind.StreamName(x), wallet.Posted{Main: money.Naira(1)}, other)
	rep = e.audit(m)
	expectClean(t, rep)
	doc, _ := json.Marshal(rep)
	for _, id := range []string{other, x} {
		if strings.Contains(string(doc), id) {
			t.Fatalf("the other merchant's %s is in the report: %s", id, doc)
		}
	}
	expectLines(t, e.audit(other),
		"balance test customer:"+x+":main: expected 3450, found 3450.01",
		"wallet customer "+x+" main: expected 3450, found 3451 (postings vs wallet stream)")

	// a: 10000 - 1200.25 - (3000 + 50 fee).
	e.exec(`UPDATE rm_balances SET balance = balance + 1 WHERE merchant_id = $1 AND holder_id = $2 AND bucket = 'main'`, m, a)
	expectLines(t, e.audit(m), "balance test customer:"+a+":main: expected 5749.75, found 5749.76")
	e.restore()
	expectClean(t, e.audit(m))

	// A row of an account the log never touched, and a missing one.
	e.exec(`INSERT INTO rm_balances (merchant_id, environment, holder, holder_id, bucket, balance) VALUES ($1, 'test', 'customer', $2, 'escrow', 100)`, m, a)
	e.exec(`DELETE FROM rm_balances WHERE merchant_id = $1 AND holder_id = $2`, m, d)
	expectLines(t, e.audit(m),
		"balance live customer:"+d+":main: expected 700, found 0",
		"balance test customer:"+a+":escrow: expected 0, found 1")
	e.restore()

	e.exec(`DELETE FROM rm_transactions WHERE id = $1`, transfer.ID)
	expectLines(t, e.audit(m), "record test record "+transfer.ID+": expected a row (success), found no row")
	e.restore()

	e.exec(`UPDATE rm_transactions SET status = 'failed' WHERE id = $1`, paid.ID)
	expectLines(t, e.audit(m), "record test record "+paid.ID+" column status: expected success, found failed")
	e.restore()

	e.exec(`UPDATE rm_transactions SET record = jsonb_set(record::jsonb, '{amount}', '3001')::json WHERE id = $1`, reversed.ID)
	expectLines(t, e.audit(m), "record test record "+reversed.ID+" amount: expected 1000, found 3001")
	e.restore()

	e.exec(`INSERT INTO rm_transactions (id, merchant_id, environment, reference, transaction_type, status, record, created_at)
		VALUES ('ghost', $1, 'test', 'ghost', 'deposit', 'success', '{}', now())`, m)
	expectLines(t, e.audit(m), "record test record ghost: expected no row, found a row (success) (no such record in the event log)")
	e.restore()
	expectClean(t, e.audit(m))

	// Each column the API filters on is compared, and the record's fields,
	// not its bytes: the same record written with other spacing is equal.
	at := paid.CreatedAt.UTC()
	for _, c := range []struct{ set, line string }{
		{`reference = 'other'`, "column reference: expected " + paid.Reference + ", found other"},
		{`transaction_type = 'deposit'`, "column transaction_type: expected " + string(paid.Type) + ", found deposit"},
		{`customer_id = 'zz'`, "column customer_id: expected " + paid.CustomerID + ", found zz"},
		{`environment = 'live'`, "column environment: expected test, found live"},
		{`created_at = created_at + interval '1 second'`,
			"column created_at: expected " + at.Format(time.RFC3339Nano) + ", found " + at.Add(time.Second).Truncate(time.Microsecond).Format(time.RFC3339Nano)},
		{`record = jsonb_pretty(record::jsonb)::json`, ""},
	} {
		e.exec(`UPDATE rm_transactions SET `+c.set+` WHERE id = $1`, paid.ID)
		*full = nil
		if c.line == "" {
			expectClean(t, e.audit(m))
		} else {
			expectLines(t, e.audit(m), "record test record "+paid.ID+" "+c.line)
		}
		if !slices.Equal(*full, []string{paid.ID}) {
			t.Fatalf("%s: compared in full %v, want only %s", c.set, *full, paid.ID)
		}
		e.restore()
	}

	// A wallet event no movement explains.
	e.appendRaw(app.WalletKind.StreamName(b), wallet.Posted{TransactionID: "bogus", Main: 5}, m)
	expectLines(t, e.audit(m), "wallet customer "+b+" main: expected 6200.25, found 6200.3 (postings vs wallet stream)")
}

func TestAuditReplayInvariants(t *testing.T) {
	e := newEnv(t)
	m := e.merchant("Shop")
	test := actor(m, domain.Test)
	a := e.customer(test, "a@x.co", "08031110001")
	top := e.topUp(test, a, 1000)
	expectClean(t, e.audit(m))

	// Forged events of m: each read model agrees with them (the projector
	// applies them), so only the replay's invariants can catch them.
	overdraw := ledger.Movement{MerchantID: m, Environment: domain.Test}
	overdraw.Move(ledger.CustomerMain(a), ledger.ExternalClearing(m), money.Naira(1500))
	pNeg := e.appendRaw("payment-forged-1", payment.Settled{Movement: &overdraw}, m)

	foreign := ledger.Movement{MerchantID: m, Environment: domain.Test}
	foreign.Move(ledger.ExternalClearing(m), ledger.PlatformRevenue("someone-else"), money.Naira(1))
	pBad := e.appendRaw("payment-forged-2", payment.Settled{Movement: &foreign}, m)

	changed := top
	changed.Status = ledger.Failed
	pChanged := e.appendRaw("payment-forged-3", payment.PayoutCompleted{Record: changed}, m)

	commission := func(id string) ledger.Record { return commissionRecord(m, id, top.CreatedAt, "esc-1") }
	e.appendRaw("payment-forged-4", payment.Settled{Records: []ledger.Record{commission("com-1")}}, m)
	e.appendRaw("payment-forged-5", payment.Settled{Records: []ledger.Record{commission("com-2")}}, m)

	// One entry moving another merchant's money with m's record.
	mixed := ledger.Movement{MerchantID: "someone-else", Environment: domain.Test}
	mixed.Move(ledger.ExternalClearing("someone-else"), ledger.CustomerMain("z"), money.Naira(1))
	pMixed := e.appendRaw("payment-forged-6", payment.Settled{Movement: &mixed, Records: []ledger.Record{commission("com-3")}}, m)

	expectLines(t, e.audit(m),
		"negative test customer:"+a+":main at "+pNeg.String()+": expected at least 0, found -500",
		"wallet customer "+a+" main: expected -500, found 1000 (postings vs wallet stream)",
		"movement test at "+pBad.String()+": ledger: malformed movement: platform:someone-else:revenue outside merchant "+m,
		"settled_once record "+top.ID+" status at "+pChanged.String()+": expected success, found failed (settled at "+recordSettledAt(t, e, top.ID).String()+")",
		"commission test escrow esc-1: expected 1 commission record, found 3 (com-1, com-2, com-3)",
		"event at "+pMixed.String()+": payment.settled of payment-forged-6 moves another merchant's money with this merchant's records",
	)
}

// commissionRecord is a settled commission of merchant m charging escrows.
func commissionRecord(m, id string, at time.Time, escrows ...string) ledger.Record {
	return ledger.Record{ID: id, Reference: id, Amount: money.Naira(12), Currency: "NGN", Status: ledger.Success,
		Type: ledger.Commission, CreditType: ledger.Credit, MerchantID: m, Environment: domain.Test,
		EscrowDetails: &ledger.EscrowDetails{EscrowIDs: escrows}, CreatedAt: at, UpdatedAt: at}
}

// recordSettledAt is the position of the first event that settled record id.
func recordSettledAt(t *testing.T, e *env, id string) eventstore.Position {
	t.Helper()
	events, err := e.store.ReadAll(e.ctx, eventstore.Start, 10000)
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range events {
		entry, ok, err := projector.DecodeEntry(re)
		if err != nil || !ok {
			continue
		}
		for _, r := range entry.Ledger().Records {
			if r.ID == id && r.Status.Settled() {
				return re.Position
			}
		}
	}
	t.Fatalf("record %s never settled", id)
	return eventstore.Position{}
}

func TestAuditUnknownMerchant(t *testing.T) {
	e := newEnv(t)
	e.merchant("Shop")
	if _, err := audit.Run(e.ctx, e.store, e.pool, "nope"); !errors.Is(err, audit.ErrUnknownMerchant) {
		t.Fatalf("unknown merchant: %v", err)
	}
}

// The audit compares the replay with a read model that a live runner keeps
// moving while payments keep arriving: it must never report that as a
// difference (the snapshot and the replay stop at the same checkpoint).
func TestAuditUnderLiveTraffic(t *testing.T) {
	e := newEnv(t)
	m := e.merchant("Shop")
	test := actor(m, domain.Test)
	var ids, phones []string
	for i := 0; i < 4; i++ {
		phone := fmt.Sprintf("0803111000%d", i)
		id := e.customer(test, fmt.Sprintf("c%d@x.co", i), phone)
		e.topUp(test, id, 10000)
		ids, phones = append(ids, id), append(phones, phone)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	runner := projections.NewRunner(e.store, e.pool, nil, projections.All(nil)...)
	ran := make(chan struct{})
	go func() { defer close(ran); _ = runner.Run(ctx) }()
	var wg sync.WaitGroup
	for w := 0; w < len(ids); w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				ref := fmt.Sprintf("live-%d-%d", w, i)
				in := app.IntentRequest{Reference: ref, Type: ledger.WalletTransfer, Amount: money.Naira(int64(100 + i%7)),
					Wallet: &ledger.WalletDetails{Phone: phones[(w+1)%len(phones)]}}
				staged, err := e.svc.CreateIntent(ctx, test, ids[w], allowed, in)
				if err != nil {
					continue // insufficient balance, or the test is ending
				}
				e.wrote(staged.Position)
				if _, pos, err := e.svc.Verify(ctx, test, ids[w], allowed, ref); err == nil {
					e.wrote(pos)
				}
			}
		}(w)
	}
	stop := sync.OnceFunc(func() { cancel(); wg.Wait(); <-ran })
	t.Cleanup(stop)
	// Audit at whatever point the log is readable, until two audits saw
	// different points (the horizon can stall while another database of
	// the server holds an old transaction open) and the last one saw
	// transfers made meanwhile (audits can be quicker than the traffic).
	seen := map[eventstore.Position]bool{}
	var moved int64
	for i, deadline := 0, time.Now().Add(30*time.Second); i < 3 || ((len(seen) < 2 || moved < 20) && time.Now().Before(deadline)); i++ {
		rep, err := audit.Run(e.ctx, e.store, e.pool, m)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Clean() {
			t.Fatalf("audit %d under traffic:\n%s", i, strings.Join(lines(rep), "\n"))
		}
		seen[rep.Position] = true
		moved = rep.Movements
	}
	stop()
	rep := e.audit(m)
	expectClean(t, rep)
	if len(seen) < 2 || rep.Movements < 20 {
		t.Fatalf("no traffic during the audits: %d positions, %d movements", len(seen), rep.Movements)
	}
}
