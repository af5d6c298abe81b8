package projections

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/domaintest"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/gateway"
)

// payouts answers per call: fail makes a call unanswered (an error).
type payouts struct {
	mu   sync.Mutex
	fail bool
	out  payment.PayoutAnswer
}

func (p *payouts) Send(context.Context, ledger.Record, string) (payment.PayoutAnswer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail {
		return payment.PayoutAnswer{}, errors.New("provider timed out")
	}
	return p.out, nil
}

func (p *payouts) set(fail bool, out payment.PayoutAnswer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail, p.out = fail, out
}

// The ledger read model lists the withdrawals debited and not yet over:
// not one staged and never verified, not one paid out or reversed; and
// PayoutsInFlight lists those debited before the time asked, oldest first.
func TestPayoutsInFlight(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	svc, a := e.service(t)
	p := &payouts{}
	svc.Gateways[domain.Test] = gateway.Set{Collection: gateway.TestCollection{}, Payouts: p}
	cid, _, err := svc.CreateCustomer(ctx, a, customer.NewCustomer{Firstname: "A", Lastname: "B", Email: "a@x.co", Phone: "08031234567"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.TopUp(ctx, a, cid, money.Naira(20000)); err != nil {
		t.Fatal(err)
	}
	account := domaintest.NUBAN(t, "058", "12", false)
	var last eventstore.Position
	for _, ref := range []string{"staged", "unanswered-1", "unanswered-2", "paid", "reversed", "later-paid"} {
		in := app.IntentRequest{Reference: ref, Type: ledger.Withdrawal, Amount: money.Naira(1000),
			Withdrawal: &ledger.WithdrawalDetails{AccountNumber: account, BankCode: "058"}}
		if _, err := svc.CreateIntent(ctx, a, cid, allowed, in); err != nil {
			t.Fatal(err)
		}
	}
	verify := func(ref string, fail bool, out payment.PayoutAnswer) {
		t.Helper()
		p.set(fail, out)
		_, pos, err := svc.Verify(ctx, a, cid, allowed, ref)
		if fail != (err != nil) {
			t.Fatalf("verify %s: %v", ref, err)
		}
		if last.Less(pos) {
			last = pos
		}
	}
	verify("unanswered-1", true, payment.PayoutAnswer{})
	cut := time.Now()
	verify("unanswered-2", true, payment.PayoutAnswer{})
	verify("paid", false, payment.PayoutAnswer{Status: payment.ProviderSucceeded})
	verify("reversed", false, payment.PayoutAnswer{Status: payment.ProviderReversed, Reason: "account closed"})
	verify("later-paid", true, payment.PayoutAnswer{})
	verify("later-paid", false, payment.PayoutAnswer{Status: payment.ProviderSucceeded})

	r := testRunner(e.store, e.pool, e.log, Ledger{})
	start(t, r)
	if err := r.WaitFor(ctx, visible(t, e.store, last)); err != nil {
		t.Fatal(err)
	}
	q := NewQueries(e.pool, nil)
	all, err := q.PayoutsInFlight(ctx, time.Now().Add(time.Hour), 10)
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, x := range all {
		if x.MerchantID != a.MerchantID || x.Environment != domain.Test {
			t.Fatalf("row %+v", x)
		}
		refs = append(refs, x.Reference)
	}
	if len(refs) != 2 || refs[0] != "unanswered-1" || refs[1] != "unanswered-2" {
		t.Fatalf("in flight %v, want unanswered-1, unanswered-2 (oldest first)", refs)
	}
	early, err := q.PayoutsInFlight(ctx, cut, 10)
	if err != nil || len(early) != 1 || early[0].Reference != "unanswered-1" {
		t.Fatalf("debited before the cut: %+v (%v), want unanswered-1", early, err)
	}
	// The page after the first row holds the rest, the first no more.
	if next, err := q.PayoutsInFlightAfter(ctx, all[0], time.Now().Add(time.Hour), 10); err != nil ||
		len(next) != 1 || next[0].Reference != "unanswered-2" {
		t.Fatalf("after %s: %+v (%v), want unanswered-2", all[0].Reference, next, err)
	}
	if last, err := q.PayoutsInFlightAfter(ctx, all[1], time.Now().Add(time.Hour), 10); err != nil || len(last) != 0 {
		t.Fatalf("after the last row: %+v (%v), want nothing", last, err)
	}
	// Paid out later: gone from the list.
	verify("unanswered-1", false, payment.PayoutAnswer{Status: payment.ProviderSucceeded})
	if err := r.WaitFor(ctx, visible(t, e.store, last)); err != nil {
		t.Fatal(err)
	}
	if left, err := q.PayoutsInFlight(ctx, time.Now().Add(time.Hour), 10); err != nil || len(left) != 1 || left[0].Reference != "unanswered-2" {
		t.Fatalf("in flight after paying one: %+v (%v)", left, err)
	}

	// A rebuild's fill gives the same payouts in flight (and balances and
	// records), whole or in pages of 2 events holding nothing.
	applied := dumpReadModels(t, e, []Projector{Ledger{}})
	defer func(page, hold int) { rebuildPage, fillHold = page, hold }(rebuildPage, fillHold)
	for _, c := range []struct{ page, hold int }{{rebuildPage, fillHold}, {2, 0}} {
		rebuildPage, fillHold = c.page, c.hold
		if err := RebuildAll(ctx, e.pool, e.store, []Projector{Ledger{}}, e.log, nil); err != nil {
			t.Fatal(err)
		}
		compareDumps(t, "rebuild", applied, dumpReadModels(t, e, []Projector{Ledger{}}))
	}
}

// Reference and Status complete gateway.Payouts: payouts answers every send at
// once, so it is never asked where a payout stands.
func (p *payouts) Reference(w ledger.Record) string { return w.ID }
func (p *payouts) Status(context.Context, ledger.Record) (payment.PayoutAnswer, error) {
	return payment.PayoutAnswer{Status: payment.ProviderUnknown}, nil
}
