package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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
	// reconcile compares the last hours, with the provider's listing
	// (kept only where keep says, when not nil).
	reconcile := func(keep func(payment.ProviderCharge) bool) app.PayoutReconciliation {
		t.Helper()
		from, to := time.Now().UTC().Add(-time.Hour), time.Now().UTC().Add(time.Hour)
		listed, err := set.Charges.Charges(context.Background(), from, to)
		if err != nil {
			t.Fatal(err)
		}
		var charges []payment.ProviderCharge
		for _, pc := range listed {
			if keep == nil || keep(pc) {
				charges = append(charges, pc)
			}
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
	rep := reconcile(nil)
	if len(rep.Healed) != 1 || rep.Healed[0].ProviderReference != missed || len(rep.Differences) != 0 {
		t.Fatalf("reconciliation %+v", rep)
	}
	h.caughtUp()
	if got := h.verify(cid, "dva-3").expect(t, 200, "").obj(); got["status"] != "success" {
		t.Fatalf("the intent of 900 after its transfer was found: %v", got)
	}
	h.expectWallet(cid, 7100, 0)
	if rep := reconcile(nil); len(rep.Healed) != 0 || len(rep.Differences) != 0 {
		t.Fatalf("second reconciliation %+v", rep)
	}
	h.expectWallet(cid, 7100, 0)

	fees := feesOf(sim) // of the transfers credited here

	// Differences both ways: money the provider received for an account
	// nobody here holds (missing here), and a credit here the provider's
	// listing lacks (missing there). Neither moves money.
	_, stranger, err := set.Charges.OpenDepositAccount(context.Background(), gateway.DepositHolder{CustomerID: "stranger", Email: "stranger@x.com"})
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := sim.PayIntoDedicatedAccount(stranger.AccountNumber, 50000)
	if err != nil {
		t.Fatal(err)
	}
	h.settleEvents(sim)
	rep = reconcile(func(pc payment.ProviderCharge) bool { return pc.Reference != first })
	var here, there bool
	for _, d := range rep.Differences {
		here = here || d.Kind == app.MissingHere && d.ProviderReference == foreign
		there = there || d.Kind == app.MissingThere && d.ProviderReference == first && d.Reference == "dva-1"
	}
	if !here || !there || len(rep.Differences) != 2 || len(rep.Healed) != 0 {
		t.Fatalf("reconciliation of a foreign credit and a lost one %+v", rep)
	}
	h.expectWallet(cid, 7100, 0)

	if cost := h.platformCost(); cost != -fees || cost >= 0 {
		t.Fatalf("processing costs %s, want minus the provider's fees %s", cost, fees)
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

// lastCharge is the reference of the simulator's newest transaction.
func lastCharge(t *testing.T, sim *paystacksim.Sim) string {
	t.Helper()
	txns := sim.Transactions()
	if len(txns) == 0 {
		t.Fatal("no transaction at the provider")
	}
	newest := txns[0]
	for _, x := range txns {
		if x.ID > newest.ID {
			newest = x
		}
	}
	return newest.Reference
}

// cardEscrow is an escrow of 10,000 whose buyer pays the fee (10,250
// due), and its buyer, with an empty wallet.
func cardEscrow(h *harness, n string) (seller, buyer, id, token string) {
	h.t.Helper()
	seller = h.createCustomer(h.sa(), "seller"+n+"@x.com", "0803555"+n+"01")
	buyer = h.createCustomer(h.sa(), "buyer"+n+"@x.com", "0803555"+n+"02")
	e := h.createEscrow(seller, map[string]string{"amount": "10000", "purpose": "Phone", "whoPays": "buyer",
		"description": "A used phone", "maxDelivery": "3", "deliveryTimeline": "days"}, 0).
		expect(h.t, 201, "Escrow created successfully").obj()
	return seller, buyer, e["id"].(string), e["paymentToken"].(string)
}

func cardIntent(ref, escrowID, gateway string) map[string]any {
	return map[string]any{"amount": 10250, "reference": ref, "transactionType": "escrow", "gateway": gateway,
		"escrowDetails": map[string]any{"escrowId": escrowID}}
}

// A card payment of an escrow: create-intent answers the provider's page;
// the verified charge.success credits the buyer and funds the escrow in
// one append (the same events as a wallet payment), once, with the
// provider's fee in the platform's costs; the buyer's wallet never shows
// the money, and the audit is clean.
func TestCardPaymentFundsEscrowInOneAppend(t *testing.T) {
	h := newHarness(t)
	sim, _ := collectThroughSim(h)
	_, buyer, id, token := cardEscrow(h, "31")
	h.intent(buyer, cardIntent("card-x", id, "cheque")).expect(t, 400, "gateway must be one of wallet, card, bank, ussd")
	rec := h.intent(buyer, cardIntent("card-1", id, "card")).expect(t, 201, "").obj()
	url, _ := rec["authorizationUrl"].(string)
	if rec["status"] != "pending" || url == "" || rec["transactionType"] != "escrow" {
		t.Fatalf("card intent %v", rec)
	}
	if again := h.intent(buyer, cardIntent("card-1", id, "card")).expect(t, 201, "").obj(); again["authorizationUrl"] != url {
		t.Fatalf("repeated intent %v, want the same page %s", again, url)
	}
	if n := len(sim.Transactions()); n != 1 {
		t.Fatalf("%d transactions initialized, want 1", n)
	}
	if got := h.verify(buyer, "card-1").expect(t, 200, "").obj(); got["status"] != "pending" {
		t.Fatalf("verified before payment: %v", got)
	}
	ref := lastCharge(t, sim)
	sim.DuplicateEvents(true)
	if err := sim.CompleteCheckout(ref, "card", true); err != nil {
		t.Fatal(err)
	}
	h.settleEvents(sim)
	sim.DuplicateEvents(false)
	if got := h.verify(buyer, "card-1").expect(t, 200, "").obj(); got["status"] != "success" || got["amount"] != 10250.0 {
		t.Fatalf("card payment after its charge: %v", got)
	}
	h.expectWallet(buyer, 0, 10250)
	if e := h.viewEscrow(token, buyer); e["status"] != "ONGOING" {
		t.Fatalf("escrow after the card payment %v", e)
	}
	// One append: the payment's settlement (its movement crediting and
	// funding at once) and the escrow's funding share a commit.
	evs, err := h.store.ReadStream(context.Background(), "payment-"+payment.StreamID(h.m.MerchantID, domain.Test, "card-1"), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var settled int
	var commit uint64
	for _, e := range evs {
		if e.Type == "payment.settled" {
			settled++
			commit = e.Position.Commit
		}
	}
	escrowEvs, err := h.store.ReadStream(context.Background(), app.EscrowKind.StreamName(id), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	sameCommit := 0
	for _, e := range escrowEvs {
		if e.Position.Commit == commit {
			sameCommit++
		}
	}
	if settled != 1 || sameCommit == 0 || h.chargeEvents(ref)["charge.applied"] != 1 {
		t.Fatalf("settled %d times; escrow events in its append %d; charge %v", settled, sameCommit, h.chargeEvents(ref))
	}
	if cost := h.platformCost(); cost != -feesOf(sim) || cost >= 0 {
		t.Fatalf("processing costs %s, want minus the fees %s", cost, feesOf(sim))
	}
	h.auditClean()
}

// An escrow deleted between the intent and the payment: the verified
// charge credits the buyer's wallet with the whole amount, the intent
// fails, nothing is funded.
func TestCardPaymentForDeletedEscrowCreditsTheBuyer(t *testing.T) {
	h := newHarness(t)
	sim, _ := collectThroughSim(h)
	seller, buyer, id, token := cardEscrow(h, "32")
	h.intent(buyer, cardIntent("card-2", id, "ussd")).expect(t, 201, "")
	h.do(req{method: "DELETE", path: "/v1/escrow/delete/" + token, key: h.std(), cid: seller}).expect(t, 200, "")
	ref := lastCharge(t, sim)
	if err := sim.CompleteCheckout(ref, "ussd", true); err != nil {
		t.Fatal(err)
	}
	h.settleEvents(sim)
	h.expectWallet(buyer, 10250, 0)
	if got := h.verify(buyer, "card-2").expect(t, 200, "").obj(); got["status"] != "failed" {
		t.Fatalf("the payment of a deleted escrow: %v", got)
	}
	hist := h.do(req{path: "/v1/payment/history", key: h.std(), cid: buyer}).expect(t, 200, "")
	if !containsReference(hist.Raw, ref) {
		t.Fatalf("history lacks the credit %s: %s", ref, hist.Raw)
	}
	// The return page says where the money went.
	res, err := http.Get(h.srv.URL + "/checkout/return?trxref=" + ref + "&reference=" + ref)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(b), "credited to your wallet") {
		t.Fatalf("return page %d: %s", res.StatusCode, b)
	}
	h.expectWallet(buyer, 10250, 0)
	h.auditClean()
}

// The hosted checkout offers card, bank and USSD beside the wallet: the
// buyer's choice leads to the provider's page, whose payment, confirmed
// on the return page (before any event), funds the escrow and completes
// the session in one append.
func TestCheckoutPaysByCard(t *testing.T) {
	h := newHarness(t)
	sim, _ := collectThroughSim(h)
	sim.SuppressEvents(true)
	f := newCheckoutFixtureOn(t, h, 0)
	f.open(t, map[string]any{"successUrl": "https://shop.example/done"})
	p := f.get(t, "/checkout/"+f.sessionID)
	for _, want := range []string{`id="pay-card"`, `id="pay-bank"`, `id="pay-ussd"`, `action="/checkout/` + f.sessionID + `/provider"`} {
		if !strings.Contains(p.body, want) {
			t.Fatalf("page lacks %s: %s", want, p.body)
		}
	}
	form := f.form(t)
	form.Set("gateway", "card")
	cont := f.post(t, "provider", form)
	if cont.status != 200 || !strings.Contains(cont.body, `href="`+sim.URL+"/_sim/checkout/") {
		t.Fatalf("provider step %d: %s", cont.status, cont.body)
	}
	if again := f.post(t, "provider", form); again.status != 200 || len(sim.Transactions()) != 1 {
		t.Fatalf("a second click initialized %d transactions", len(sim.Transactions()))
	}
	ref := lastCharge(t, sim)
	back := f.get(t, "/checkout/return?reference="+ref)
	if back.status != 200 || !strings.Contains(back.body, "Waiting for your payment") {
		t.Fatalf("return before paying %d: %s", back.status, back.body)
	}
	if err := sim.CompleteCheckout(ref, "card", true); err != nil {
		t.Fatal(err)
	}
	back = f.get(t, "/checkout/return?reference="+ref)
	if back.status != 200 || !strings.Contains(back.body, "Payment successful") || !strings.Contains(back.body, "https://shop.example/done?") {
		t.Fatalf("return after paying %d: %s", back.status, back.body)
	}
	s := h.do(req{path: "/v1/checkout/sessions/" + f.sessionID, key: h.std()}).expect(t, 200, "").obj()
	if s["status"] != "complete" {
		t.Fatalf("session after the card payment %v", s)
	}
	h.expectWallet(f.buyer, 0, 10250) // the additional fee is the merchant's
	if p := f.get(t, "/checkout/"+f.sessionID); p.status != 410 {
		t.Fatalf("a paid session's page answered %d", p.status)
	}
	if r := f.get(t, "/checkout/return?reference=nope-"+ref); r.status != 404 {
		t.Fatalf("an unknown reference's return page answered %d", r.status)
	}
	h.auditClean()
}

// The same charge.success delivered concurrently to two API instances
// over one database, each with its own inbox worker and its own client
// of the provider: the deposit is credited once.
func TestChargeEventOnTwoInstancesCreditsOnce(t *testing.T) {
	h := newHarness(t)
	sim, _ := collectThroughSim(h)
	other := wired.API(Config{DefaultEnvironment: domain.Test, MaxReadyHorizon: time.Minute},
		h.store, h.pool, h.runner, nil, nil)
	t.Cleanup(other.Close)
	otherSet, err := paystackgw.New(paystackgw.Config{SecretKey: collectKey, BaseURL: sim.URL, DVABank: "test-bank"})
	if err != nil {
		t.Fatal(err)
	}
	other.App().Gateways[domain.Test] = otherSet
	srv := httptest.NewServer(other.Handler())
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = other.ProviderEvents().Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	cid := h.createCustomer(h.sa(), "race-dva@x.com", "08031119301")
	acct := h.intent(cid, map[string]any{"amount": 2500, "reference": "race-dva", "transactionType": "deposit"}).
		expect(t, 201, "").obj()["depositAccount"].(map[string]any)
	sim.SuppressEvents(true)
	ref, err := sim.PayIntoDedicatedAccount(acct["accountNumber"].(string), 250000)
	if err != nil {
		t.Fatal(err)
	}
	h.settleEvents(sim)
	evs := sim.Events()
	body := string(evs[len(evs)-1].Body)
	sig := paystackSignature(collectKey, body)
	var wg sync.WaitGroup
	start := make(chan struct{})
	codes := make([]int, 8)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			url := ""
			if i%2 == 1 {
				url = srv.URL
			}
			codes[i] = h.hook(url, "test", body, sig).Status
		}()
	}
	// The inbox keeps one event once; what else asks about the charge at
	// the same time (a verify, reconciliation) goes past it, to the
	// charge's own stream.
	settles := make([]error, 4)
	for i := range settles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			svc := h.svc
			if i%2 == 1 {
				svc = other.App()
			}
			_, settles[i] = svc.SettleCharge(context.Background(), domain.Test, ref, "race")
		}()
	}
	close(start)
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Fatalf("delivery %d answered %d", i, c)
		}
	}
	for i, err := range settles {
		if err != nil {
			t.Fatalf("settle %d: %v", i, err)
		}
	}
	_, _ = other.ProviderEvents().Drain(context.Background())
	h.settleEvents(sim)
	h.expectWallet(cid, 2500, 0)
	if got := h.chargeEvents(ref); got["charge.applied"] != 1 {
		t.Fatalf("charge %s events %v", ref, got)
	}
	if got := h.paymentEventTypes("race-dva"); got["payment.settled"] != 1 {
		t.Fatalf("intent events %v", got)
	}
	h.auditClean()
}

func paystackSignature(key, body string) string {
	m := hmac.New(sha512.New, []byte(key))
	m.Write([]byte(body))
	return hex.EncodeToString(m.Sum(nil))
}
