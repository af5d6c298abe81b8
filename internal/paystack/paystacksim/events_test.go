package paystacksim_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/escrowd/escrowd/internal/paystack"
)

// dedicatedAccount opens a customer's dedicated account.
func dedicatedAccount(t *testing.T, r *rig, email string) paystack.DedicatedAccount {
	t.Helper()
	ctx := context.Background()
	cus := must(r.client.CreateCustomer(ctx, paystack.CustomerRequest{Email: email}))
	return must(r.client.CreateDedicatedAccount(ctx, paystack.DedicatedAccountRequest{Customer: cus.CustomerCode}))
}

func TestDuplicateEvents(t *testing.T) {
	r := start(t, nil)
	acct := dedicatedAccount(t, r, "d@example.com")
	r.sim.DuplicateEvents(true)
	must(r.sim.PayIntoDedicatedAccount(acct.AccountNumber, 20_000))
	r.idle(t)
	ev := r.hook.events()
	if len(ev) != 2 || string(ev[0].Data) != string(ev[1].Data) {
		t.Fatalf("events %+v", ev)
	}
	r.sim.DuplicateEvents(false)
	must(r.sim.PayIntoDedicatedAccount(acct.AccountNumber, 20_000))
	r.idle(t)
	if n := len(r.hook.events()); n != 3 {
		t.Fatalf("%d events", n)
	}
}

// A suppressed event never arrives; the transaction is found by listing.
func TestSuppressedEvents(t *testing.T) {
	r := start(t, nil)
	acct := dedicatedAccount(t, r, "s@example.com")
	r.sim.SuppressEvents(true)
	ref := must(r.sim.PayIntoDedicatedAccount(acct.AccountNumber, 30_000))
	r.idle(t)
	if n := len(r.hook.events()); n != 0 {
		t.Fatalf("%d events while suppressed", n)
	}
	if d := r.sim.Events(); len(d) != 1 || !d[0].Suppressed || len(d[0].Statuses) != 0 {
		t.Fatalf("deliveries %+v", d)
	}
	txs := must(r.client.ListTransactions(context.Background(), paystack.ListParams{Status: "success"}))
	if len(txs) != 1 || txs[0].Reference != ref {
		t.Fatalf("listed %+v", txs)
	}
}

// A forged event fails the signature check; the simulator redelivers it
// until its attempts are spent, then stops.
func TestForgedEvent(t *testing.T) {
	r := start(t, nil)
	acct := dedicatedAccount(t, r, "f@example.com")
	r.sim.ForgeNextEvent()
	must(r.sim.PayIntoDedicatedAccount(acct.AccountNumber, 40_000))
	r.idle(t)
	d := r.sim.Events()
	if len(d) != 1 || !d[0].Forged || d[0].Delivered || !d[0].Done || len(d[0].Statuses) != 5 {
		t.Fatalf("delivery %+v", d)
	}
	if paystack.VerifySignature(secret, d[0].Body, d[0].Signature) {
		t.Fatal("a forged signature verifies")
	}
	if n := len(r.hook.events()); n != 0 || r.hook.refused != 5 {
		t.Fatalf("%d accepted, %d refused", n, r.hook.refused)
	}
	r.sim.SendEvent("charge.success", json.RawMessage(`{"reference":"made-up","status":"success","amount":99900000}`), false)
	r.idle(t)
	ev := r.hook.events()
	if len(ev) != 1 {
		t.Fatalf("events %+v", ev)
	}
	if _, err := r.client.VerifyTransaction(context.Background(), "made-up"); !paystack.IsNotFound(err) {
		t.Fatalf("verify of an event for nothing: %v", err)
	}
}

// An event that lies is genuinely signed; verify tells the truth.
func TestLyingEvent(t *testing.T) {
	r := start(t, nil)
	acct := dedicatedAccount(t, r, "l@example.com")
	r.sim.LieInNextEvent("success", 5_000_000)
	ref := must(r.sim.PayIntoDedicatedAccount(acct.AccountNumber, 50_000))
	r.idle(t)
	ev := r.hook.events()
	if len(ev) != 1 {
		t.Fatalf("events %+v", ev)
	}
	claim := must(paystack.TransactionOf(ev[0]))
	truth := must(r.client.VerifyTransaction(context.Background(), ref))
	if claim.Amount != 5_000_000 || truth.Amount != 50_000 || !r.sim.Events()[0].Lie {
		t.Fatalf("claim %d, truth %d", claim.Amount, truth.Amount)
	}
}

// A webhook that answers 500 gets the event again, until it answers 200.
func TestEventRedelivery(t *testing.T) {
	r := start(t, nil)
	acct := dedicatedAccount(t, r, "r@example.com")
	r.hook.mu.Lock()
	r.hook.fail = 2
	r.hook.mu.Unlock()
	must(r.sim.PayIntoDedicatedAccount(acct.AccountNumber, 60_000))
	r.idle(t)
	d := r.sim.Events()
	if len(d) != 1 || !d[0].Delivered || len(d[0].Statuses) != 3 || d[0].Statuses[0] != 500 || d[0].Statuses[2] != 200 {
		t.Fatalf("delivery %+v", d)
	}
	if n := len(r.hook.events()); n != 1 {
		t.Fatalf("%d accepted", n)
	}
}
