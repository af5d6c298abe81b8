package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/domaintest"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/gateway"
	"github.com/escrowd/escrowd/internal/paystack"
	"github.com/escrowd/escrowd/internal/paystack/paystacksim"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/internal/wiring"
)

// simulatedPaystack is a Paystack simulator on loopback taking secretKey,
// and the test environment's gateways on it.
func simulatedPaystack(t *testing.T, secretKey string) (*paystacksim.Sim, *httptest.Server, map[domain.Environment]gateway.Set) {
	t.Helper()
	sim, err := paystacksim.New(paystacksim.Config{SecretKey: secretKey})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	sets, err := wiring.Gateways(map[domain.Environment]wiring.Provider{domain.Test: {Name: "paystack", SecretKey: secretKey, BaseURL: srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	return sim, srv, sets
}

// Withdrawals the resumer cannot finish, through the commands an operator
// runs: a blocked customer's and one the provider never answered are
// listed with why; a retry pays one out, a return gives the other's money
// back once, each an event whose actor is the operator.
func TestPayoutsHeldAndResolve(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewURL(t)
	sim, srv, sets := simulatedPaystack(t, "sk_test_held")
	t.Setenv("ESCROW_PROVIDER_TEST", "paystack")
	t.Setenv("ESCROW_PAYSTACK_SECRET_KEY_TEST", "sk_test_held")
	t.Setenv("ESCROW_PAYSTACK_BASE_URL", srv.URL)

	out, err := cli(t, db, "merchant", "create", "--name", "Acme", "--business", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		MerchantID string `json:"merchantId"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	env := testEnv(t, db)
	svc := wiring.Application(env.Store, env.Pool, 100)
	svc.Gateways = sets
	actor := app.Actor{MerchantID: m.MerchantID, Environment: domain.Test}
	may := customer.Permissions{CanBuy: true, CanSell: true, CanWithdraw: true}
	withdraw := func(email, phone, ref string) (cid string) {
		t.Helper()
		cid, _, err := svc.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "A", Lastname: "B", Email: email, Phone: phone})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := svc.TopUp(ctx, actor, cid, money.Naira(5000)); err != nil {
			t.Fatal(err)
		}
		in := app.IntentRequest{Reference: ref, Type: ledger.Withdrawal, Amount: money.Naira(1000),
			Withdrawal: &ledger.WithdrawalDetails{AccountNumber: domaintest.NUBAN(t, "058", "12", false), BankCode: "058"}}
		if _, err := svc.CreateIntent(ctx, actor, cid, may, in); err != nil {
			t.Fatal(err)
		}
		// The provider fails the send of this verify (each of the client's
		// three tries): the withdrawal is debited and left unanswered.
		sim.FailNext(paystack.OpInitiateTransfer, http.StatusInternalServerError, 3)
		if _, _, err := svc.Verify(ctx, actor, cid, may, ref); err == nil {
			t.Fatalf("verify %s: the provider failing, want an error", ref)
		}
		return cid
	}
	blocked := withdraw("a@x.co", "08031234567", "wd-blocked")
	if _, err := svc.SetBlocked(ctx, actor, blocked, true, "fraud review"); err != nil {
		t.Fatal(err)
	}
	unanswered := withdraw("b@x.co", "08031234568", "wd-unanswered")

	// Both were debited just now: listed only once the lease is over.
	if out, err := cli(t, db, "payouts", "held"); err != nil || strings.TrimSpace(out) != "No withdrawal is held." {
		t.Fatalf("held within the lease: %v\n%s", err, out)
	}
	out, err = cli(t, db, "payouts", "held", "--older-than", "0s", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var held []heldLine
	if err := json.Unmarshal([]byte(out), &held); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	why := map[string]string{}
	ids := map[string]string{}
	for _, h := range held {
		why[h.Reference], ids[h.Reference] = h.Hold, h.ID
	}
	if len(held) != 2 || why["wd-blocked"] != string(payment.HoldCustomerBlocked) || why["wd-unanswered"] != string(payment.HoldUnanswered) {
		t.Fatalf("held: %s", out)
	}
	text, err := cli(t, db, "payouts", "held", "--older-than", "0s")
	if err != nil || !strings.Contains(text, `reference "wd-blocked"`) || !strings.Contains(text, payment.HoldCustomerBlocked.Explain()) {
		t.Fatalf("held as text: %v\n%s", err, text)
	}

	// The retry sends it; the provider accepts it and keeps it pending
	// (listed as such) until it pays it; a second retry asks it then.
	if err := sim.AutoSettleTransfers("", 0); err != nil {
		t.Fatal(err)
	}
	if out, err := cli(t, db, "payouts", "resolve", ids["wd-unanswered"], "--retry"); err != nil || !strings.Contains(out, "still paying out (status pending)") {
		t.Fatalf("retry: %v\n%s", err, out)
	}
	if out, err := cli(t, db, "payouts", "held", "--older-than", "0s"); err != nil ||
		!strings.Contains(out, `reference "wd-unanswered"`) || !strings.Contains(out, string(payment.HoldAwaitingOutcome)) {
		t.Fatalf("held once accepted: %v\n%s", err, out)
	}
	transfers := sim.Transfers()
	if len(transfers) != 1 {
		t.Fatalf("the provider has %d transfers, want 1 (the retried one)", len(transfers))
	}
	if err := sim.SettleTransfer(transfers[0].Reference, paystack.TransferSuccess); err != nil {
		t.Fatal(err)
	}
	if out, err := cli(t, db, "payouts", "resolve", ids["wd-unanswered"], "--retry"); err != nil || !strings.Contains(out, "paid out (status success)") {
		t.Fatalf("retry once paid: %v\n%s", err, out)
	}
	if out, err := cli(t, db, "payouts", "resolve", ids["wd-blocked"], "--return"); err != nil ||
		!strings.Contains(out, "returned to the customer's wallet (status failed)") {
		t.Fatalf("return: %v\n%s", err, out)
	}
	if out, err := cli(t, db, "payouts", "resolve", ids["wd-blocked"], "--return"); err == nil || !strings.Contains(err.Error(), "settled already") {
		t.Fatalf("a second return: %v\n%s", err, out)
	}
	if _, err := cli(t, db, "payouts", "resolve", ids["wd-blocked"], "--retry", "--return"); err == nil {
		t.Fatal("both --retry and --return: want a usage error")
	}
	if out, err := cli(t, db, "payouts", "held", "--older-than", "0s"); err != nil || strings.TrimSpace(out) != "No withdrawal is held." {
		t.Fatalf("held after resolving both: %v\n%s", err, out)
	}

	for cid, want := range map[string]money.Amount{blocked: money.Naira(5000), unanswered: money.Naira(5000 - 1000 - 50)} {
		w, _, err := app.Load(ctx, svc.Engine, app.WalletKind, cid)
		if err != nil || w.Main != want {
			t.Errorf("customer %s: main %s (%v), want %s", cid, w.Main, err, want)
		}
	}
	if n := len(sim.Transfers()); n != 1 {
		t.Errorf("the provider made %d transfers, want 1 (the retried one)", n)
	}
	// The last payout events of the log are the resolutions: the retry's
	// lease and completion, and the return.
	events, err := env.Store.ReadAll(ctx, eventstore.Position{}, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	var last []string
	for _, e := range events {
		if strings.HasPrefix(e.Type, "payment.payout_") {
			var meta domain.Meta
			if err := json.Unmarshal(e.Metadata, &meta); err != nil {
				t.Fatal(err)
			}
			last = append(last, e.Type+" by "+meta.Actor)
		}
	}
	want := []string{"payment.payout_leased by operator", "payment.payout_accepted by operator",
		"payment.payout_completed by operator", "payment.payout_failed by operator"}
	if len(last) < len(want) || strings.Join(last[len(last)-len(want):], ", ") != strings.Join(want, ", ") {
		t.Fatalf("payout events: %v; want them to end with %v", last, want)
	}
}
