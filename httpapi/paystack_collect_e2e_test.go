package httpapi

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/audit"
	"github.com/escrowd/escrowd/internal/gateway"
	"github.com/escrowd/escrowd/internal/gateway/paystackgw"
	"github.com/escrowd/escrowd/internal/paystack/paystacksim"
)

const collectKey = "sk_test_collect_e2e"

// collectThroughSim puts the harness's test environment wholly on
// Paystack, over the real HTTP client, against a simulator whose signed
// events reach the harness's /hooks/paystack/test.
func collectThroughSim(h *harness) (*paystacksim.Sim, gateway.Set) {
	h.t.Helper()
	sim, err := paystacksim.Start(paystacksim.Config{SecretKey: collectKey, WebhookURL: h.srv.URL + "/hooks/paystack/test"})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { sim.Close() })
	set, err := paystackgw.New(paystackgw.Config{SecretKey: collectKey, BaseURL: sim.URL, DVABank: "test-bank"})
	if err != nil {
		h.t.Fatal(err)
	}
	h.svc.Gateways[domain.Test] = set
	return sim, set
}

// settleEvents waits until the simulator has delivered every event and
// the inbox has processed each one.
func (h *harness) settleEvents(sim *paystacksim.Sim) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sim.WaitIdle(ctx); err != nil {
		h.t.Fatal(err)
	}
	for {
		var open int
		if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM provider_inbox WHERE state <> 'done'`).Scan(&open); err != nil {
			h.t.Fatal(err)
		}
		if open == 0 {
			break
		}
		if _, err := h.api.ProviderEvents().Drain(ctx); err != nil {
			h.t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			h.t.Fatalf("%d events still unprocessed", open)
		case <-time.After(10 * time.Millisecond):
		}
	}
	h.caughtUp()
}

// walletBody is GET /v1/wallet's data.
func (h *harness) walletBody(cid string) map[string]any {
	h.t.Helper()
	return h.do(req{path: "/v1/wallet", key: h.std(), cid: cid}).expect(h.t, 200, "Wallet fetched successfully").obj()
}

// auditClean runs the audit of the harness's merchant and fails on any
// difference.
func (h *harness) auditClean() audit.Report {
	h.t.Helper()
	h.caughtUp()
	rep, err := audit.Run(context.Background(), h.store, h.pool, h.m.MerchantID)
	if err != nil {
		h.t.Fatal(err)
	}
	if len(rep.Differences) != 0 {
		h.t.Fatalf("audit differences: %+v", rep.Differences)
	}
	return rep
}

// platformCost is the merchant's processing-cost account's balance.
func (h *harness) platformCost() money.Amount {
	h.t.Helper()
	h.caughtUp()
	var kobo int64
	if err := h.pool.QueryRow(context.Background(),
		`SELECT coalesce(sum(balance), 0) FROM rm_balances WHERE merchant_id = $1 AND holder = 'platform' AND bucket = 'cost'`,
		h.m.MerchantID).Scan(&kobo); err != nil {
		h.t.Fatal(err)
	}
	return money.Amount(kobo)
}

// chargeEvents counts the events of a charge's stream by type.
func (h *harness) chargeEvents(providerRef string) map[string]int {
	h.t.Helper()
	evs, err := h.store.ReadStream(context.Background(), app.ChargeKind.StreamName(payment.ChargeID(domain.Test, providerRef)), 0, 1000)
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range evs {
		out[e.Type]++
	}
	return out
}

// feesOf sums the simulator's fees of the successful transactions.
func feesOf(sim *paystacksim.Sim) money.Amount {
	var fees int64
	for _, t := range sim.Transactions() {
		if t.Status == "success" {
			fees += t.Fees
		}
	}
	return money.Amount(fees)
}

// A customer's first deposit opens their dedicated account at the
// provider (shown on the wallet from then on); a transfer into it credits
// the customer once, only on the provider's verify answer: delivered
// twice, it credits once; a deposit intent is settled by a transfer of
// its amount without a second credit; a genuinely signed event whose body
// lies about the amount credits what verify says; one that claims a
// payment the provider does not have paid credits nothing; a forged one
// is refused; a transfer whose event never came is found and credited by
// reconciliation, once; and the audit finds the ledger, fees included,
// balanced.
func TestDedicatedAccountDepositsCreditedOnce(t *testing.T) {
	h := newHarness(t)
	sim, set := collectThroughSim(h)
	cid := h.createCustomer(h.sa(), "dva@x.com", "08031119201")
	if w := h.walletBody(cid); w["depositAccount"] != nil {
		t.Fatalf("a wallet before any deposit shows %v", w["depositAccount"])
	}

	rec := h.intent(cid, map[string]any{"amount": 5000, "reference": "dva-1", "transactionType": "deposit"}).expect(t, 201, "").obj()
	acct, _ := rec["depositAccount"].(map[string]any)
	if rec["status"] != "pending" || acct == nil || acct["accountNumber"] == "" || acct["bankName"] != "Test Bank" || rec["testAccount"] != nil {
		t.Fatalf("deposit intent %v", rec)
	}
	number := acct["accountNumber"].(string)
	if w := h.walletBody(cid); w["depositAccount"] == nil || w["depositAccount"].(map[string]any)["accountNumber"] != number {
		t.Fatalf("wallet %v, want the dedicated account %s", w, number)
	}
	// A second intent is shown the same account.
	again := h.intent(cid, map[string]any{"amount": 700, "reference": "dva-2", "transactionType": "deposit"}).expect(t, 201, "").obj()
	if again["depositAccount"].(map[string]any)["accountNumber"] != number {
		t.Fatalf("second intent %v", again)
	}
	if got := h.verify(cid, "dva-1").expect(t, 200, "").obj(); got["status"] != "pending" {
		t.Fatalf("verified before any transfer: %v", got)
	}

	// A transfer of the intent's amount, its event delivered twice.
	sim.DuplicateEvents(true)
	first, err := sim.PayIntoDedicatedAccount(number, 500000)
	if err != nil {
		t.Fatal(err)
	}
	h.settleEvents(sim)
	sim.DuplicateEvents(false)
	h.expectWallet(cid, 5000, 0)
	if got := h.verify(cid, "dva-1").expect(t, 200, "").obj(); got["status"] != "success" || got["amount"] != 5000.0 {
		t.Fatalf("intent after its transfer: %v", got)
	}
	if got := h.paymentEventTypes("dva-1"); got["payment.settled"] != 1 {
		t.Fatalf("events of dva-1 %v", got)
	}
	if got := h.chargeEvents(first); got["charge.applied"] != 1 {
		t.Fatalf("events of charge %s %v", first, got)
	}

	// A transfer no intent awaits, whose event lies about its amount.
	sim.LieInNextEvent("", 90000000)
	lied, err := sim.PayIntoDedicatedAccount(number, 120000)
	if err != nil {
		t.Fatal(err)
	}
	h.settleEvents(sim)
	h.expectWallet(cid, 6200, 0)
	if got := h.verify(cid, "dva-2").expect(t, 200, "").obj(); got["status"] != "pending" {
		t.Fatalf("an intent of 700 settled by a transfer of 1,200: %v", got)
	}
	hist := h.do(req{path: "/v1/payment/history", key: h.std(), cid: cid}).expect(t, 200, "")
	if !containsReference(hist.Raw, lied) {
		t.Fatalf("history lacks the deposit %s: %s", lied, hist.Raw)
	}

	// A signed event about a checkout nobody paid, claiming success.
	h.intent(cid, map[string]any{"amount": 900, "reference": "dva-3", "transactionType": "deposit"}).expect(t, 201, "")
	unpaid := h.startUnpaidCharge(set, "dva@x.com", 90000)
	data, _ := json.Marshal(map[string]any{"id": 424242, "reference": unpaid,
		"status": "success", "amount": 90000, "channel": "dedicated_nuban", "currency": "NGN",
		"authorization": map[string]any{"receiver_bank_account_number": number}})
	sim.SendEvent("charge.success", data, false)
	body := `{"event":"charge.success","data":` + string(data) + `}`
	h.settleEvents(sim)
	h.expectWallet(cid, 6200, 0)

	// A forged event is refused and kept nowhere.
	before := h.inboxCount()
	if r := h.hook("", "test", body, "00"+signed(body)[2:]); r.Status != 401 {
		t.Fatalf("forged event answered %d", r.Status)
	}
	if h.inboxCount() != before {
		t.Fatal("a forged event was kept")
	}
	h.expectWallet(cid, 6200, 0)

	// A transfer whose event never comes: reconciliation finds it, once.
	sim.SuppressEvents(true)
	missed, err := sim.PayIntoDedicatedAccount(number, 90000)
	if err != nil {
		t.Fatal(err)
	}
	h.settleEvents(sim)
	sim.SuppressEvents(false)
	h.expectWallet(cid, 6200, 0)
	reconcile := func() app.PayoutReconciliation {
		t.Helper()
		from, to := time.Now().UTC().Add(-time.Hour), time.Now().UTC().Add(time.Hour)
		charges, err := set.Charges.Charges(context.Background(), from, to)
		if err != nil {
			t.Fatal(err)
		}
		h.caughtUp()
		collected, err := h.api.queries.Collected(context.Background(), domain.Test, from, to)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := h.svc.ReconcileCharges(context.Background(), domain.Test, charges, collected)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	rep := reconcile()
	if len(rep.Healed) != 1 || rep.Healed[0].ProviderReference != missed || len(rep.Differences) != 0 {
		t.Fatalf("reconciliation %+v", rep)
	}
	h.caughtUp()
	if got := h.verify(cid, "dva-3").expect(t, 200, "").obj(); got["status"] != "success" {
		t.Fatalf("the intent of 900 after its transfer was found: %v", got)
	}
	h.expectWallet(cid, 7100, 0)
	if rep := reconcile(); len(rep.Healed) != 0 || len(rep.Differences) != 0 {
		t.Fatalf("second reconciliation %+v", rep)
	}
	h.expectWallet(cid, 7100, 0)

	if cost := h.platformCost(); cost != -feesOf(sim) || cost >= 0 {
		t.Fatalf("processing costs %s, want minus the provider's fees %s", cost, feesOf(sim))
	}
	h.auditClean()
}

// startUnpaidCharge initializes a transaction at the provider nobody pays.
func (h *harness) startUnpaidCharge(set gateway.Set, email string, kobo int64) string {
	h.t.Helper()
	ref := set.Charges.Reference("unpaid-" + h.m.MerchantID)
	if _, err := set.Charges.Initialize(context.Background(), gateway.ChargeRequest{Reference: ref, Email: email, Amount: money.Amount(kobo)}); err != nil {
		h.t.Fatal(err)
	}
	return ref
}

func containsReference(raw []byte, ref string) bool {
	var env struct {
		Data any `json:"data"`
	}
	if json.Unmarshal(raw, &env) != nil {
		return false
	}
	var walk func(v any) bool
	walk = func(v any) bool {
		switch x := v.(type) {
		case map[string]any:
			if x["reference"] == ref {
				return true
			}
			for _, y := range x {
				if walk(y) {
					return true
				}
			}
		case []any:
			for _, y := range x {
				if walk(y) {
					return true
				}
			}
		}
		return false
	}
	return walk(env.Data)
}
