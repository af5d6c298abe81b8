package app

import (
	"context"
	"reflect"
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
	got := raceOnTwo(a, b, n, func(_ int, svc *Service) error {
		_, _, err := svc.TopUp(ctx, actor, cid, money.Naira(1000))
		return err
	})
	if want := map[string]int{"ok": 1, "unauthenticated: You can only top up your account once a day": n - 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	w, _, err := Load(ctx, a.Engine, WalletKind, cid)
	if err != nil || w.Main != money.Naira(1000) {
		t.Fatalf("main %s (%v): want exactly one top-up", w.Main, err)
	}
}
