package app

import (
	"context"
	"testing"

	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
)

var allowed = customer.Permissions{CanBuy: true, CanSell: true, CanWithdraw: true}

// Verify decides from the cached intent, but a stale cache never makes it
// refuse or pay twice: instance B has cached "no such intent" and then
// "staged" while instance A creates, then settles it.
func TestVerifyOnAStaleCache(t *testing.T) {
	ctx := context.Background()
	a, b, _, actor := twoInstances(t)
	cid, _, err := a.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "A", Lastname: "B", Email: "a@x.co", Phone: "08031234567"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Intent(ctx, actor, cid, "dep"); err != payment.ErrNotFound {
		t.Fatalf("before staging: %v", err)
	}
	in := IntentRequest{Reference: "dep", Type: ledger.Deposit, Amount: money.Naira(500)}
	if _, err := a.CreateIntent(ctx, actor, cid, allowed, in); err != nil {
		t.Fatal(err)
	}
	// B's cache says there is no such intent: B must look again, not refuse.
	st, err := b.Intent(ctx, actor, cid, "dep")
	if err != nil || st.Phase != payment.Staged {
		t.Fatalf("B after A staged: %+v, %v", st.Phase, err)
	}
	// A settles it; B, whose cache still says staged, verifies: the stored
	// outcome, and the money moved once.
	if _, _, err := a.Verify(ctx, actor, cid, allowed, "dep"); err != nil {
		t.Fatal(err)
	}
	rec, _, err := b.Verify(ctx, actor, cid, allowed, "dep")
	if err != nil || rec.Status != ledger.Success {
		t.Fatalf("B's verify: %+v, %v", rec, err)
	}
	w, _, err := Load(ctx, b.Engine, WalletKind, cid)
	if err != nil || w.Main != money.Naira(500) {
		t.Fatalf("wallet %+v, %v: the deposit must be credited exactly once", w, err)
	}
	// Another customer's reference is refused, on fresh state.
	other, _, err := a.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "C", Lastname: "D", Email: "c@x.co", Phone: "08031234568"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Verify(ctx, actor, other, allowed, "dep"); err != payment.ErrNotFound {
		t.Fatalf("another customer's reference: %v", err)
	}
}

// The once-a-day top-up rule holds under racing top-ups on two instances:
// the rule is decided on the wallet's revision-checked state.
func TestTopUpOnceUnderRaces(t *testing.T) {
	ctx := context.Background()
	a, b, _, actor := twoInstances(t)
	cid, _, err := a.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "A", Lastname: "B", Email: "a@x.co", Phone: "08031234567"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		svc := []*Service{a, b}[i%2]
		go func() {
			_, _, err := svc.TopUp(ctx, actor, cid, money.Naira(1000))
			errs <- err
		}()
	}
	ok := 0
	for i := 0; i < n; i++ {
		switch err := <-errs; {
		case err == nil:
			ok++
		case err.Error() != "You can only top up your account once a day":
			t.Fatal(err)
		}
	}
	w, _, err := Load(ctx, a.Engine, WalletKind, cid)
	if err != nil {
		t.Fatal(err)
	}
	if ok != 1 || w.Main != money.Naira(1000) {
		t.Fatalf("%d top-ups succeeded, main %s: want exactly one", ok, w.Main)
	}
}
