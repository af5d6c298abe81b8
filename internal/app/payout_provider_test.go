package app

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/domaintest"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/domain/reference"
	"github.com/escrowd/escrowd/internal/gateway"
)

// bankRail is a provider as Paystack behaves for bank payouts: it pays
// only to registered recipients, keeps one transfer per reference (a send
// again under a reference it knows answers that transfer, as the adapter
// reads a duplicate-reference refusal back), resolves the accounts it
// knows, and can lose the answer of a send that it performed.
type bankRail struct {
	mu         sync.Mutex
	names      map[string]string // account number -> name
	resolves   int
	recipients map[string]int    // account number -> registrations
	transfers  map[string]string // reference -> recipient paid
	sends      int
	loseNext   bool // perform the next send, then answer an error
	down       bool // resolution unreachable
}

func newBankRail(names map[string]string) *bankRail {
	return &bankRail{names: names, recipients: map[string]int{}, transfers: map[string]string{}}
}

func (r *bankRail) Reference(w ledger.Record) string { return "wd_" + w.ID }

func (r *bankRail) Recipient(_ context.Context, to ledger.WithdrawalDetails) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recipients[to.AccountNumber]++
	return "RCP_" + to.AccountNumber, nil
}

func (r *bankRail) Resolve(_ context.Context, _, account string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resolves++
	if r.down {
		return "", errors.New("connection refused")
	}
	if n, ok := r.names[account]; ok {
		return n, nil
	}
	return "", gateway.ErrAccountUnresolved
}

func (r *bankRail) Send(_ context.Context, w ledger.Record, recipient string) (payment.PayoutAnswer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sends++
	if recipient != "RCP_"+w.WithdrawalDetails.AccountNumber {
		return payment.PayoutAnswer{Status: payment.ProviderFailed, Reason: "unknown recipient " + recipient}, nil
	}
	ref := r.Reference(w)
	if _, ok := r.transfers[ref]; !ok {
		r.transfers[ref] = recipient
	}
	if r.loseNext {
		r.loseNext = false
		return payment.PayoutAnswer{}, errors.New("the answer was lost")
	}
	return payment.PayoutAnswer{Status: payment.ProviderPending, Transfer: "TRF_" + ref}, nil
}

func (r *bankRail) Status(_ context.Context, w ledger.Record) (payment.PayoutAnswer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.transfers[r.Reference(w)]; ok {
		return payment.PayoutAnswer{Status: payment.ProviderSucceeded}, nil
	}
	return payment.PayoutAnswer{Status: payment.ProviderUnknown}, nil
}

func (r *bankRail) counts() (resolves, sends, transfers int, recipients map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rc := map[string]int{}
	for k, v := range r.recipients {
		rc[k] = v
	}
	return r.resolves, r.sends, len(r.transfers), rc
}

// onBankRail is a service paying out through rail on test, and a customer
// holding 5,000.
func onBankRail(t *testing.T, rail *bankRail) (a, b *Service, actor Actor, cid string) {
	t.Helper()
	a, b, _, actor = twoInstances(t)
	for _, svc := range []*Service{a, b} {
		svc.Gateways[domain.Test] = gateway.Set{Collection: gateway.TestCollection{}, Payouts: rail, Recipients: rail, Accounts: rail}
	}
	cid = stageWithdrawals(t, a, actor) // a customer holding 5,000, nothing staged
	return a, b, actor, cid
}

func bankIntent(ref, account, name string) IntentRequest {
	return IntentRequest{Reference: ref, Type: ledger.Withdrawal, Amount: money.Naira(1000),
		Withdrawal: &ledger.WithdrawalDetails{AccountNumber: account, BankCode: "058", AccountName: name}}
}

// An account the bank does not know is refused before anything is staged
// or debited; an unreachable bank refuses too, as unavailable. The name a
// withdrawal carries is the bank's, whatever the client sent, and never
// the test bank's invented one.
func TestBankPayoutDestinationIsResolved(t *testing.T) {
	ctx := context.Background()
	known := domaintest.NUBAN(t, "058", "12", false)
	unknown := domaintest.NUBAN(t, "058", "34", false)
	rail := newBankRail(map[string]string{known: "ADA OBI"})
	a, b, actor, cid := onBankRail(t, rail)
	if _, err := a.CreateIntent(ctx, actor, cid, allowed, bankIntent("wd-unknown", unknown, "")); !errors.Is(err, ErrAccountUnresolved) {
		t.Fatalf("unknown account: %v", err)
	}
	if st := recordOf(t, a, actor, "wd-unknown"); st.Exists() {
		t.Fatal("an intent was staged for an unknown account")
	}
	expectMain(t, a, cid, money.Naira(5000))
	for _, name := range []string{"", "Someone Else"} {
		ref := "wd-named-" + name
		res, err := a.CreateIntent(ctx, actor, cid, allowed, bankIntent(ref, known, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Record.WithdrawalDetails.AccountName; got != "ADA OBI" || got == reference.TestAccountName("058", known) {
			t.Fatalf("account name %q, want the bank's", got)
		}
	}
	// Resolutions are kept: the provider was asked twice (unknown, known)
	// on a, and b asks once for itself.
	if resolves, _, _, _ := rail.counts(); resolves != 2 {
		t.Fatalf("resolved %d times, want 2", resolves)
	}
	rail.mu.Lock()
	rail.down = true
	rail.mu.Unlock()
	if _, err := b.CreateIntent(ctx, actor, cid, allowed, bankIntent("wd-down", known, "")); domain.ErrorCode(err) != domain.Unavailable {
		t.Fatalf("bank unreachable: %v", err)
	}
	if name, err := a.ResolveAccount(ctx, domain.Test, "058", known); err != nil || name != "ADA OBI" {
		t.Fatalf("kept resolution: %q, %v", name, err)
	}
}

// A recipient is registered once per account and kept as an event; every
// payout to the account is sent to it.
func TestBankPayoutRecipientIsKeptPerAccount(t *testing.T) {
	ctx := context.Background()
	known := domaintest.NUBAN(t, "058", "12", false)
	rail := newBankRail(map[string]string{known: "ADA OBI"})
	a, b, actor, cid := onBankRail(t, rail)
	for i, svc := range []*Service{a, b, a} {
		ref := []string{"wd-r1", "wd-r2", "wd-r3"}[i]
		if _, err := svc.CreateIntent(ctx, actor, cid, allowed, bankIntent(ref, known, "")); err != nil {
			t.Fatal(err)
		}
		if rec, _, err := svc.Verify(ctx, actor, cid, allowed, ref); err != nil || rec.Status != ledger.Pending {
			t.Fatalf("verify %s: %s, %v", ref, rec.Status, err)
		}
	}
	if _, sends, transfers, recipients := rail.counts(); sends != 3 || transfers != 3 || recipients[known] != 1 {
		t.Fatalf("sends %d transfers %d recipients %v; want 3, 3, one registration", sends, transfers, recipients)
	}
	types := streamTypes(t, a.Engine.Store(), RecipientKind.StreamName(payment.RecipientID(domain.Test, payment.RecipientKey("058", known))))
	if len(types) != 1 || types[0] != "recipient.registered" {
		t.Fatalf("recipient stream %v", types)
	}
	expectMain(t, a, cid, money.Naira(5000-3*1050))
}

// A send whose answer was lost is sent again under the same reference:
// the provider keeps one transfer, the customer is debited once, and the
// payout settles on the provider's word.
func TestLostPayoutAnswerPaysOnce(t *testing.T) {
	ctx := context.Background()
	known := domaintest.NUBAN(t, "058", "12", false)
	rail := newBankRail(map[string]string{known: "ADA OBI"})
	rail.loseNext = true
	a, b, actor, cid := onBankRail(t, rail)
	if _, err := a.CreateIntent(ctx, actor, cid, allowed, bankIntent("wd-lost", known, "")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Verify(ctx, actor, cid, allowed, "wd-lost"); !errors.Is(err, ErrPayoutUnanswered) {
		t.Fatalf("verify: %v, want ErrPayoutUnanswered", err)
	}
	// Asked again (the client verifies again on the other instance).
	if rec, _, err := b.Verify(ctx, actor, cid, allowed, "wd-lost"); err != nil || rec.Status != ledger.Pending {
		t.Fatalf("verify again: %s, %v", rec.Status, err)
	}
	if _, sends, transfers, _ := rail.counts(); sends != 2 || transfers != 1 {
		t.Fatalf("sends %d, transfers %d; want 2 sends, one transfer", sends, transfers)
	}
	b.PayoutPollAfter = 1 // poll at once
	r := &PayoutResumer{Service: b, Find: listing(actor, "wd-lost")}
	if settled, err := r.Round(ctx); err != nil || settled != 1 {
		t.Fatalf("round settled %d, %v", settled, err)
	}
	if st := recordOf(t, a, actor, "wd-lost"); st.Record.Status != ledger.Success {
		t.Fatalf("status %s", st.Record.Status)
	}
	expectMain(t, a, cid, money.Naira(5000-1050))
}
