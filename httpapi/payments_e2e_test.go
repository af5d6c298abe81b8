package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/domaintest"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/domain/reference"
	"github.com/escrowd/escrowd/internal/gateway"
)

// Payment helpers: all through real HTTP.

func (h *harness) topUp(cid string, amount any) resp {
	h.t.Helper()
	return h.do(req{method: "POST", path: "/v1/payment/topup", key: h.std(), cid: cid, body: map[string]any{"amount": amount}})
}

// wallet is the customer's balances as GET /v1/wallet shows them, read
// exactly (never through a float64).
func (h *harness) wallet(cid string) (main, escrow money.Amount) {
	h.t.Helper()
	r := h.do(req{path: "/v1/wallet", key: h.std(), cid: cid}).expect(h.t, 200, "Wallet fetched successfully")
	if d := r.obj(); d["customerId"] != cid || d["currency"] != "NGN" {
		h.t.Fatalf("wallet %v", d)
	}
	return h.balances(r)
}

// balances reads mainBalance and escrowBalance of a response's data as the
// exact decimals they are written in.
func (h *harness) balances(r resp) (main, escrow money.Amount) {
	h.t.Helper()
	var env struct {
		Data struct {
			Main   json.Number `json:"mainBalance"`
			Escrow json.Number `json:"escrowBalance"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.Raw, &env); err != nil {
		h.t.Fatalf("balances: %v: %s", err, r.Raw)
	}
	var err error
	if main, err = money.Parse(env.Data.Main.String()); err != nil {
		h.t.Fatalf("mainBalance %q: %v", env.Data.Main, err)
	}
	if escrow, err = money.Parse(env.Data.Escrow.String()); err != nil {
		h.t.Fatalf("escrowBalance %q: %v", env.Data.Escrow, err)
	}
	return main, escrow
}

// amount is an expected balance: naira as a literal with at most two
// decimals (1025.5), or a money.Amount read earlier; compared in kobo.
func (h *harness) amount(v any) money.Amount {
	h.t.Helper()
	switch x := v.(type) {
	case money.Amount:
		return x
	case int:
		return money.Naira(int64(x))
	case float64:
		k := math.Round(x * 100)
		if math.Abs(x*100-k) > 1e-6 {
			h.t.Fatalf("expected balance %v has more than two decimals", x)
		}
		return money.Amount(int64(k))
	}
	h.t.Fatalf("expected balance of type %T", v)
	return 0
}

func (h *harness) expectWallet(cid string, main, escrow any) {
	h.t.Helper()
	if m, e := h.wallet(cid); m != h.amount(main) || e != h.amount(escrow) {
		h.t.Fatalf("wallet of %s = main %s escrow %s, want %s %s", cid, m, e, h.amount(main), h.amount(escrow))
	}
}

func (h *harness) intent(cid string, body map[string]any) resp {
	h.t.Helper()
	return h.do(req{method: "POST", path: "/v1/payment/create-intent", key: h.std(), cid: cid, body: body})
}

func (h *harness) verify(cid, ref string) resp {
	h.t.Helper()
	return h.do(req{method: "POST", path: "/v1/payment/verify", key: h.std(), cid: cid, body: map[string]any{"reference": ref}})
}

// funded creates a customer whose main balance is amount (a test top-up).
func (h *harness) funded(email, phone string, amount float64) string {
	h.t.Helper()
	cid := h.createCustomer(h.sa(), email, phone)
	if amount > 0 {
		h.topUp(cid, amount).expect(h.t, 200, "Wallet topped up successfully")
	}
	return cid
}

// nuban is domaintest.NUBAN (kept short: the tests use it a lot).
var nuban = domaintest.NUBAN

func bankWithdrawal(ref string, amount any, account string) map[string]any {
	return map[string]any{"reference": ref, "amount": amount, "transactionType": "withdrawal",
		"withdrawalDetails": map[string]any{"accountNumber": account, "bankCode": "058", "narration": "rent"}}
}

func TestTopUp(t *testing.T) {
	h := newHarness(t)
	cid := h.createCustomer(h.sa(), "t@x.com", "08031110001")
	h.expectWallet(cid, 0, 0)
	for _, tc := range []struct {
		amount any
		msg    string
	}{
		{nil, "amount is required"},
		{999, "amount must be between 1000 and 100000"},
		{100000.01, "amount must be between 1000 and 100000"},
		{"1000.555", "amount must have at most 2 decimal places"},
	} {
		if tc.msg == "" {
			continue
		}
		body := map[string]any{}
		if tc.amount != nil {
			body["amount"] = tc.amount
		}
		h.do(req{method: "POST", path: "/v1/payment/topup", key: h.std(), cid: cid, body: body}).expect(t, 400, tc.msg)
	}
	h.do(req{method: "POST", path: "/v1/payment/topup", key: h.std(), cid: cid, body: `{"amount":"ten"}`}).expect(t, 400, "amount must be a number")
	h.do(req{method: "POST", path: "/v1/payment/topup", key: h.std(), cid: cid, body: `{"amount":1e3}`}).expect(t, 400, "amount must be a number")
	h.do(req{method: "POST", path: "/v1/payment/topup", key: h.std(), body: `{"amount":1000}`}).expect(t, 400, "customer-id header is required")

	rec := h.topUp(cid, 2500.5).expect(t, 200, "Wallet topped up successfully").obj()
	for k, want := range map[string]any{"amount": 2500.5, "fee": 0.0, "status": "success", "transactionType": "deposit",
		"creditType": "credit", "customerId": cid, "currency": "NGN", "environment": "test", "merchantId": h.m.MerchantID} {
		if rec[k] != want {
			t.Errorf("top-up record %s = %v, want %v", k, rec[k], want)
		}
	}
	h.expectWallet(cid, 2500.5, 0)
	h.topUp(cid, 1000).expect(t, 401, "You can only top up your account once a day")
	h.expectWallet(cid, 2500.5, 0)

	// Live keys on the live host: the route is test-only.
	live := key(h.m, domain.Live, merchant.Standard)
	liveSA := key(h.m, domain.Live, merchant.SuperAdmin)
	r := h.do(req{method: "POST", path: "/v1/customer/create", key: liveSA, host: liveHost,
		body: map[string]any{"firstname": "L", "lastname": "V", "email": "l@x.com", "phone": "08031110002"}}).expect(t, 201, "")
	lcid := r.obj()["customerId"].(string)
	h.do(req{method: "POST", path: "/v1/payment/topup", key: live, host: liveHost, cid: lcid, body: map[string]any{"amount": 1000}}).
		expect(t, 403, "This route is only available on staging environment")
	// Deposits and bank payouts on live have no provider: a clear refusal.
	h.do(req{method: "POST", path: "/v1/payment/create-intent", key: live, host: liveHost, cid: lcid,
		body: map[string]any{"reference": "live-dep", "amount": 500, "transactionType": "deposit"}}).
		expect(t, 400, "Payments are not configured for this environment")
	h.do(req{method: "POST", path: "/v1/payment/create-intent", key: live, host: liveHost, cid: lcid,
		body: bankWithdrawal("live-wd", 500, nuban(t, "058", "1", false))}).
		expect(t, 400, "Payments are not configured for this environment")
}

func TestDepositIntentVerify(t *testing.T) {
	h := newHarness(t)
	cid := h.createCustomer(h.sa(), "d@x.com", "08031110003")
	other := h.createCustomer(h.sa(), "o@x.com", "08031110004")
	body := map[string]any{"reference": "dep-1", "amount": "2500.50", "transactionType": "deposit", "currency": "NGN"}
	rec := h.intent(cid, body).expect(t, 201, "Payment intent created successfully").obj()
	if rec["status"] != "pending" || rec["amount"] != 2500.5 || rec["fee"] != 0.0 || rec["reference"] != "dep-1" || rec["creditType"] != "credit" {
		t.Fatalf("intent %v", rec)
	}
	ta := rec["testAccount"].(map[string]any)
	if ta["amount"] != 2500.5 || !reference.ValidNUBAN("058", ta["accountNumber"].(string)) || ta["bankName"] == "" || ta["accountName"] == "" {
		t.Fatalf("testAccount %v", ta)
	}
	h.expectWallet(cid, 0, 0)

	// The same request again is the same intent; another payment under the
	// reference is refused.
	again := h.intent(cid, body).expect(t, 201, "Payment intent created successfully").obj()
	if again["id"] != rec["id"] {
		t.Fatalf("repeat created a second intent: %v vs %v", again["id"], rec["id"])
	}
	body2 := map[string]any{"reference": "dep-1", "amount": 100, "transactionType": "deposit"}
	h.intent(cid, body2).expect(t, 409, "Reference already used for a different transaction")
	h.intent(other, body).expect(t, 409, "Reference already used for a different transaction")

	h.verify(other, "dep-1").expect(t, 400, "Transaction not found")
	h.verify(cid, "nope").expect(t, 400, "Transaction not found")
	got := h.verify(cid, "dep-1").expect(t, 200, "Payment verified successfully").obj()
	if got["status"] != "success" || got["id"] != rec["id"] {
		t.Fatalf("verified %v", got)
	}
	h.expectWallet(cid, 2500.5, 0)
	// Verifying again returns the stored outcome and moves nothing.
	h.verify(cid, "dep-1").expect(t, 200, "Payment verified successfully")
	h.expectWallet(cid, 2500.5, 0)
	// A settled reference still cannot be restaged.
	h.intent(cid, body2).expect(t, 409, "Reference already used for a different transaction")

	for _, tc := range []struct {
		body map[string]any
		msg  string
	}{
		{map[string]any{"reference": "x", "amount": 100}, "transactionType is required"},
		{map[string]any{"reference": "x", "amount": 100, "transactionType": "loan"}, "transactionType must be one of deposit, withdrawal, wallet_transfer, escrow"},
		{map[string]any{"amount": 100, "transactionType": "deposit"}, "reference is required"},
		{map[string]any{"reference": strings.Repeat("r", 101), "amount": 100, "transactionType": "deposit"}, "reference must be at most 100 characters"},
		{map[string]any{"reference": "x", "transactionType": "deposit"}, "amount is required"},
		{map[string]any{"reference": "x", "amount": 99.99, "transactionType": "deposit"}, "amount must be at least 100"},
		{map[string]any{"reference": "x", "amount": -500, "transactionType": "deposit"}, "amount must be at least 100"},
		{map[string]any{"reference": "x", "amount": "100.001", "transactionType": "deposit"}, "amount must have at most 2 decimal places"},
		{map[string]any{"reference": "x", "amount": true, "transactionType": "deposit"}, "amount must be a number"},
		{map[string]any{"reference": "x", "amount": 100, "transactionType": "deposit", "currency": "USD"}, "currency must be NGN"},
		{map[string]any{"reference": "x", "amount": 100, "transactionType": "wallet_transfer"}, "walletDetails.phone is required"},
		{map[string]any{"reference": "x", "amount": 100, "transactionType": "withdrawal"}, "A withdrawal needs exactly one of withdrawalDetails or blockchainDetails"},
	} {
		h.intent(cid, tc.body).expect(t, 400, tc.msg)
	}
	h.do(req{method: "POST", path: "/v1/payment/verify", key: h.std(), cid: cid, body: map[string]any{}}).expect(t, 400, "reference is required")
	h.do(req{method: "POST", path: "/v1/payment/verify", key: h.std(), cid: cid, body: map[string]any{"reference": "a", "references": []string{"b"}}}).
		expect(t, 400, "Send either reference or references, not both")
	h.do(req{method: "POST", path: "/v1/payment/verify", key: h.std(), cid: cid, body: map[string]any{"references": []string{}}}).
		expect(t, 400, "references must be a non-empty array of strings")
}

func TestBatchVerify(t *testing.T) {
	h := newHarness(t)
	cid := h.createCustomer(h.sa(), "b@x.com", "08031110005")
	for i := 1; i <= 3; i++ {
		h.intent(cid, map[string]any{"reference": fmt.Sprintf("b-%d", i), "amount": 100 * i, "transactionType": "deposit"}).expect(t, 201, "")
	}
	// Each reference runs on its own: an unknown one has an error entry in
	// its place, and the answer still shows what the others moved.
	mixed := h.do(req{method: "POST", path: "/v1/payment/verify", key: h.std(), cid: cid,
		body: map[string]any{"references": []string{"b-1", "b-x", "b-2"}}}).expect(t, 200, "Payments verified successfully").Data.([]any)
	if len(mixed) != 3 {
		t.Fatalf("entries %v", mixed)
	}
	first, refused, third := mixed[0].(map[string]any), mixed[1].(map[string]any), mixed[2].(map[string]any)
	if first["reference"] != "b-1" || first["status"] != "success" || third["reference"] != "b-2" || third["status"] != "success" {
		t.Fatalf("executed entries %v %v", first, third)
	}
	if len(refused) != 3 || refused["reference"] != "b-x" || refused["status"] != "error" || refused["message"] != "Transaction not found" {
		t.Fatalf("refused entry %v", refused)
	}
	h.expectWallet(cid, 300, 0)
	r := h.do(req{method: "POST", path: "/v1/payment/verify", key: h.std(), cid: cid,
		body: map[string]any{"references": []string{"b-1", "b-2", "b-3"}}}).expect(t, 200, "Payments verified successfully")
	recs := r.Data.([]any)
	if len(recs) != 3 {
		t.Fatalf("records %v", recs)
	}
	for i, x := range recs {
		rec := x.(map[string]any)
		if rec["reference"] != fmt.Sprintf("b-%d", i+1) || rec["status"] != "success" {
			t.Fatalf("record %d: %v", i, rec)
		}
	}
	h.expectWallet(cid, 600, 0)
	h.do(req{method: "POST", path: "/v1/payment/verify", key: h.std(), cid: cid,
		body: map[string]any{"references": []string{"b-1", "b-2", "b-3"}}}).expect(t, 200, "Payments verified successfully")
	h.expectWallet(cid, 600, 0)
}

func TestBankWithdrawalAndReversal(t *testing.T) {
	h := newHarness(t)
	cid := h.funded("w@x.com", "08031110006", 10000)
	good := nuban(t, "058", "12", false)
	failing := nuban(t, "058", "34", true)

	h.do(req{method: "POST", path: "/v1/payment/verify-account", key: h.std(), cid: cid,
		body: map[string]any{"accountNumber": good, "bankCode": "058"}}).expect(t, 200, "Account details retrieved successfully")

	rec := h.intent(cid, bankWithdrawal("wd-1", 1000, good)).expect(t, 201, "").obj()
	wd := rec["withdrawalDetails"].(map[string]any)
	if rec["fee"] != 50.0 || rec["status"] != "pending" || rec["creditType"] != "debit" ||
		wd["bankName"] != "Guaranty Trust Bank" || wd["accountName"] != reference.TestAccountName("058", good) {
		t.Fatalf("withdrawal intent %v", rec)
	}
	h.expectWallet(cid, 10000, 0) // staging moves nothing
	done := h.verify(cid, "wd-1").expect(t, 200, "").obj()
	if done["status"] != "success" {
		t.Fatalf("withdrawal %v", done)
	}
	h.expectWallet(cid, 8950, 0)
	h.verify(cid, "wd-1").expect(t, 200, "")
	h.expectWallet(cid, 8950, 0)

	// An account ending in 0000 fails at the bank: the whole debit (fee
	// included) comes back and the record says reversed.
	h.intent(cid, bankWithdrawal("wd-2", 2000, failing)).expect(t, 201, "")
	rev := h.verify(cid, "wd-2").expect(t, 200, "").obj()
	if rev["status"] != "reversed" {
		t.Fatalf("failing payout %v", rev)
	}
	h.expectWallet(cid, 8950, 0)

	for _, tc := range []struct {
		body map[string]any
		msg  string
	}{
		{bankWithdrawal("e1", 100000, good), "Insufficient balance"},
		{map[string]any{"reference": "e2", "amount": 100, "transactionType": "withdrawal",
			"withdrawalDetails": map[string]any{"accountNumber": good, "bankCode": "999"}}, "bankCode is not a supported bank"},
		{bankWithdrawal("e3", 100, good[:9]+string('0'+(good[9]-'0'+1)%10)), "Could not resolve account name"},
		{map[string]any{"reference": "e4", "amount": 100, "transactionType": "withdrawal",
			"withdrawalDetails": map[string]any{"bankCode": "058"}}, "withdrawalDetails.accountNumber is required"},
		{map[string]any{"reference": "e5", "amount": 100, "transactionType": "withdrawal",
			"withdrawalDetails": map[string]any{"accountNumber": good, "bankCode": "058"},
			"blockchainDetails": map[string]any{"toAddress": "0x" + strings.Repeat("a", 40), "network": "BSC"}},
			"A withdrawal needs exactly one of withdrawalDetails or blockchainDetails"},
	} {
		h.intent(cid, tc.body).expect(t, 400, tc.msg)
	}
	h.do(req{method: "POST", path: "/v1/payment/verify-account", key: h.std(), cid: cid,
		body: map[string]any{"accountNumber": "0123456789", "bankCode": "058"}}).expect(t, 400, "Could not resolve account name")
	h.do(req{method: "POST", path: "/v1/payment/verify-account", key: h.std(), cid: cid,
		body: map[string]any{"accountNumber": good, "bankCode": "000"}}).expect(t, 400, "Could not resolve account name")
	h.do(req{method: "POST", path: "/v1/payment/verify-account", key: h.std(), cid: cid,
		body: map[string]any{"bankCode": "058"}}).expect(t, 400, "accountNumber is required")

	// Intent staged, then the balance is spent elsewhere: verify refuses and
	// the intent stays pending.
	h.intent(cid, bankWithdrawal("wd-3", 5000, good)).expect(t, 201, "")
	h.intent(cid, bankWithdrawal("wd-4", 5000, good)).expect(t, 201, "")
	h.verify(cid, "wd-3").expect(t, 200, "")
	h.verify(cid, "wd-4").expect(t, 400, "Insufficient balance")
	h.expectWallet(cid, 3900, 0)

	// Without canWithdraw: no withdrawal or transfer, staged or verified.
	h.intent(cid, bankWithdrawal("wd-5", 100, good)).expect(t, 201, "")
	h.do(req{method: "PUT", path: "/v1/customer/permissions/" + cid, key: h.sa(), body: map[string]any{"canWithdraw": false}}).expect(t, 200, "")
	h.intent(cid, bankWithdrawal("wd-6", 100, good)).expect(t, 401, "Access denied")
	h.verify(cid, "wd-5").expect(t, 401, "Access denied")
	h.expectWallet(cid, 3900, 0)
}

func TestWalletTransfer(t *testing.T) {
	h := newHarness(t)
	a := h.funded("a@x.com", "08031110007", 5000)
	b := h.createCustomer(h.sa(), "b@x.com", "08031110008")
	other := h.newMerchant(true)
	h.do(req{method: "POST", path: "/v1/customer/create", key: key(other, domain.Test, merchant.SuperAdmin),
		body: map[string]any{"firstname": "X", "lastname": "Y", "email": "x@x.com", "phone": "08031110009"}}).expect(t, 201, "")

	transfer := func(ref, phone string, amount any) map[string]any {
		return map[string]any{"reference": ref, "amount": amount, "transactionType": "wallet_transfer",
			"walletDetails": map[string]any{"phone": phone, "narration": "lunch"}}
	}
	// Any spelling of the receiver's phone.
	rec := h.intent(a, transfer("t-1", "2348031110008", 1200.25)).expect(t, 201, "").obj()
	if wd := rec["walletDetails"].(map[string]any); wd["customerId"] != b || rec["fee"] != 0.0 {
		t.Fatalf("transfer intent %v", rec)
	}
	h.verify(a, "t-1").expect(t, 200, "")
	h.expectWallet(a, 3799.75, 0)
	h.expectWallet(b, 1200.25, 0)
	h.verify(a, "t-1").expect(t, 200, "")
	h.expectWallet(b, 1200.25, 0)

	// The receiver sees a credit in its history.
	hist := h.do(req{path: "/v1/payment/history", key: h.std(), cid: b}).expect(t, 200, "Transaction history fetched successfully").obj()
	rows := hist["data"].([]any)
	if len(rows) != 1 {
		t.Fatalf("receiver history %v", hist)
	}
	in := rows[0].(map[string]any)
	if in["creditType"] != "credit" || in["amount"] != 1200.25 || in["transactionType"] != "wallet_transfer" || in["status"] != "success" {
		t.Fatalf("receiver record %v", in)
	}

	h.intent(a, transfer("t-2", "08031110007", 100)).expect(t, 400, "You cannot transfer to yourself")
	h.intent(a, transfer("t-3", "08039999999", 100)).expect(t, 400, "No customer found with the provided phone")
	h.intent(a, transfer("t-4", "08031110009", 100)).expect(t, 400, "No customer found with the provided phone") // another merchant's
	h.intent(a, transfer("t-5", "08031110008", 100000)).expect(t, 400, "Insufficient balance")
	h.do(req{method: "PUT", path: "/v1/customer/block/" + b, key: h.sa(), body: map[string]any{}}).expect(t, 200, "")
	h.intent(a, transfer("t-6", "08031110008", 100)).expect(t, 400, "The recipient's account is disabled")
}

func TestPaymentHistoryPaging(t *testing.T) {
	h := newHarness(t)
	cid := h.createCustomer(h.sa(), "h@x.com", "08031110010")
	for i := 1; i <= 12; i++ {
		h.intent(cid, map[string]any{"reference": fmt.Sprintf("h-%02d", i), "amount": 100 + i, "transactionType": "deposit"}).expect(t, 201, "")
	}
	h.verify(cid, "h-12").expect(t, 200, "")
	page := func(q string) map[string]any {
		return h.do(req{path: "/v1/payment/history" + q, key: h.std(), cid: cid}).expect(t, 200, "Transaction history fetched successfully").obj()
	}
	p := page("")
	rows, pg := p["data"].([]any), p["pagination"].(map[string]any)
	if len(rows) != 10 || pg["count"] != 12.0 || pg["pages"] != 2.0 || pg["isLastPage"] != false || pg["nextPage"] != 2.0 || pg["previousPage"] != nil {
		t.Fatalf("default page: %d rows, %v", len(rows), pg)
	}
	if first := rows[0].(map[string]any); first["reference"] != "h-12" || first["status"] != "success" {
		t.Fatalf("newest first: %v", first)
	}
	p = page("?page=2&limit=5")
	if rows := p["data"].([]any); len(rows) != 5 || rows[0].(map[string]any)["reference"] != "h-07" {
		t.Fatalf("page 2: %v", rows)
	}
	for _, q := range []string{"?limit=500", "?limit=0", "?limit=abc", "?limit=-3"} {
		p = page(q)
		want := 10
		if q == "?limit=500" {
			want = 12 // capped at 100, all 12 fit
		}
		if n := len(p["data"].([]any)); n != want {
			t.Fatalf("%s: %d rows, want %d", q, n, want)
		}
	}
	// reference, fromDate or toDate: a flat array.
	flat := h.do(req{path: "/v1/payment/history?reference=h-03", key: h.std(), cid: cid}).expect(t, 200, "").Data.([]any)
	if len(flat) != 1 || flat[0].(map[string]any)["reference"] != "h-03" {
		t.Fatalf("by reference: %v", flat)
	}
	flat = h.do(req{path: "/v1/payment/history?fromDate=2000-01-01&toDate=2999-12-31", key: h.std(), cid: cid}).expect(t, 200, "").Data.([]any)
	if len(flat) != 12 {
		t.Fatalf("date range: %d", len(flat))
	}
	flat = h.do(req{path: "/v1/payment/history?toDate=2000-01-01", key: h.std(), cid: cid}).expect(t, 200, "").Data.([]any)
	if len(flat) != 0 {
		t.Fatalf("before 2000: %d", len(flat))
	}
	h.do(req{path: "/v1/payment/history?fromDate=yesterday", key: h.std(), cid: cid}).
		expect(t, 400, "fromDate must be a date (YYYY-MM-DD) or an RFC 3339 time")
	if n := len(page("?type=withdrawal")["data"].([]any)); n != 0 {
		t.Fatalf("type filter: %d", n)
	}
	if n := page("?type=deposit")["pagination"].(map[string]any)["count"]; n != 12.0 {
		t.Fatalf("type filter deposit: %v", n)
	}

	// The merchant's ledger and balance: super-admin only, no customer-id.
	h.do(req{path: "/v1/merchant/balance", key: h.std()}).expect(t, 401, "Access denied")
	h.do(req{path: "/v1/merchant/balance", key: h.sa(), cid: cid}).expect(t, 400, "customer-id is not allowed in request header")
	bal := h.do(req{path: "/v1/merchant/balance", key: h.sa()}).expect(t, 200, "Merchant balance fetched successfully").obj()
	if bal["mainBalance"] != 0.0 || bal["escrowBalance"] != 0.0 {
		t.Fatalf("merchant balance %v", bal)
	}
	mt := h.do(req{path: "/v1/merchant/transactions", key: h.sa()}).expect(t, 200, "Merchant transactions fetched successfully").obj()
	if len(mt["data"].([]any)) != 0 { // customers' records are never the merchant's
		t.Fatalf("merchant ledger %v", mt)
	}
	h.do(req{path: "/v1/merchant/transactions?reference=h-01", key: h.sa()}).expect(t, 200, "")
	h.do(req{path: "/v1/merchant/transactions", key: h.std()}).expect(t, 401, "Access denied")
}

// parallel runs f n times at once and returns how many succeeded. Every
// goroutine waits on a start barrier that opens only once all n are
// launched, so the calls overlap instead of running one after another.
func parallel(n int, f func(i int) bool) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if f(i) {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	return ok
}

func TestConcurrentDebitsNeverOverdraw(t *testing.T) {
	h := newHarness(t)
	a := h.funded("c@x.com", "08031110011", 10000)
	b := h.createCustomer(h.sa(), "d@x.com", "08031110012")
	good := nuban(t, "058", "5", false)
	// 20 withdrawals of 1000 (+50 fee) staged while the balance covers each
	// one alone, verified at once: exactly 9 fit in 10000.
	for i := 0; i < 20; i++ {
		h.intent(a, bankWithdrawal(fmt.Sprintf("cw-%d", i), 1000, good)).expect(t, 201, "")
	}
	won := parallel(20, func(i int) bool {
		r := h.verify(a, fmt.Sprintf("cw-%d", i))
		if r.Status != 200 && r.Message != "Insufficient balance" {
			t.Errorf("verify: %d %s", r.Status, r.Raw)
		}
		return r.Status == 200
	})
	if won != 9 {
		t.Fatalf("%d withdrawals succeeded, want 9", won)
	}
	h.expectWallet(a, 550, 0)

	// Transfers racing on both wallets in both directions. a's top-up for
	// the day is spent, so a deposit of 4500 brings it to 5050: each side
	// can then afford all ten of its sends of 500 in any order (wallet
	// transfers are free), and an "Insufficient balance" is never right.
	h.topUp(b, 5000).expect(t, 200, "")
	const aStart, bStart = 550 + 4500, 5000
	h.intent(a, map[string]any{"reference": "ct-fund", "amount": 4500, "transactionType": "deposit"}).expect(t, 201, "")
	h.verify(a, "ct-fund").expect(t, 200, "Payment verified successfully")
	h.expectWallet(a, aStart, 0)
	h.expectWallet(b, bStart, 0)
	for i := 0; i < 20; i++ {
		from, phone := a, "08031110012"
		if i%2 == 1 {
			from, phone = b, "08031110011"
		}
		h.intent(from, map[string]any{"reference": fmt.Sprintf("ct-%d", i), "amount": 500, "transactionType": "wallet_transfer",
			"walletDetails": map[string]any{"phone": phone}}).expect(t, 201, "")
	}
	var moved [2]atomic.Int64 // successful transfers out of a, out of b
	parallel(20, func(i int) bool {
		from := a
		if i%2 == 1 {
			from = b
		}
		r := h.verify(from, fmt.Sprintf("ct-%d", i))
		if r.Status != 200 && r.Message != "Insufficient balance" {
			t.Errorf("verify: %d %s", r.Status, r.Raw)
		}
		if r.Status == 200 {
			moved[i%2].Add(1)
		}
		return r.Status == 200
	})
	aOut, bOut := moved[0].Load(), moved[1].Load()
	// b (5000) and a (5050) can always afford their ten sends of 500.
	if bOut != 10 || aOut < 1 {
		t.Fatalf("transfers out of a %v, out of b %v", aOut, bOut)
	}
	if aOut != 10 || bOut != 10 {
		t.Fatalf("transfers out of a %v, out of b %v, want 10 and 10: none may be refused", aOut, bOut)
	}
	ma, _ := h.wallet(a)
	mb, _ := h.wallet(b)
	if ma != money.Naira(aStart-500*aOut+500*bOut) || mb != money.Naira(bStart+500*aOut-500*bOut) {
		t.Fatalf("wallets after transfers: a %v, b %v; %v out of a, %v out of b", ma, mb, aOut, bOut)
	}
	// Ten sends of 500 each way: both end where they started.
	h.expectWallet(a, aStart-10*500+10*500, 0)
	h.expectWallet(b, bStart+10*500-10*500, 0)
	h.assertZeroSum()
}

func TestReusedReferenceMovesMoneyOnce(t *testing.T) {
	h := newHarness(t)
	a := h.funded("r@x.com", "08031110013", 10000)
	receiver := h.createCustomer(h.sa(), "s@x.com", "08031110014")
	// 20 racing create-intents under one reference with different amounts:
	// exactly one intent exists afterwards.
	created := parallel(20, func(i int) bool {
		r := h.intent(a, map[string]any{"reference": "same", "amount": 1000 + i, "transactionType": "wallet_transfer",
			"walletDetails": map[string]any{"phone": "08031110014"}})
		if r.Status != 201 && r.Status != 409 {
			t.Errorf("intent: %d %s", r.Status, r.Raw)
		}
		return r.Status == 201
	})
	if created != 1 {
		t.Fatalf("%d intents created under one reference", created)
	}
	// 20 racing verifies of it: the money moves once.
	parallel(20, func(int) bool { return h.verify(a, "same").expect(t, 200, "").Status == 200 })
	m, _ := h.wallet(a)
	if m < money.Naira(8981) || m > money.Naira(9000) {
		t.Fatalf("sender main %v: the transfer moved more than once", m)
	}
	if got, _ := h.wallet(receiver); got != money.Naira(10000)-m {
		t.Fatalf("receiver main %v, want exactly what the sender paid (%v)", got, money.Naira(10000)-m)
	}
	hist := h.do(req{path: "/v1/payment/history?reference=same", key: h.std(), cid: a}).expect(t, 200, "").Data.([]any)
	if len(hist) != 1 {
		t.Fatalf("records under the reference: %d", len(hist))
	}
	h.assertZeroSum()
}

// assertZeroSum checks the ledger invariants on the read model: every
// merchant's accounts sum to zero per environment and no wallet is negative.
func (h *harness) assertZeroSum() {
	h.t.Helper()
	h.caughtUp()
	pool := h.api.queries.Pool()
	rows, err := pool.Query(context.Background(), `SELECT merchant_id, environment, sum(balance) FROM rm_balances GROUP BY 1, 2`)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var m, env string
		var sum int64
		if err := rows.Scan(&m, &env, &sum); err != nil {
			h.t.Fatal(err)
		}
		if sum != 0 {
			h.t.Errorf("merchant %s/%s accounts sum to %d kobo", m, env, sum)
		}
	}
	var negative int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM rm_balances WHERE holder <> 'external' AND balance < 0`).Scan(&negative); err != nil {
		h.t.Fatal(err)
	}
	if negative != 0 {
		h.t.Errorf("%d accounts below zero", negative)
	}
}

func TestCryptoWithdrawal(t *testing.T) {
	master := "0x" + strings.Repeat("9", 40)
	h := newHarness(t, func(c *Config) { c.BSCMasterAddress = map[domain.Environment]string{domain.Test: master} })
	cid := h.funded("k@x.com", "08031110020", 5000)
	addr := "0xAbCdEf0123456789aBcDeF0123456789AbCdEf01"
	h.do(req{method: "POST", path: "/v1/whitelist-address", key: h.std(), cid: cid,
		body: map[string]any{"walletAddress": addr, "network": "BSC", "label": "cold"}}).expect(t, 201, "Wallet address whitelisted successfully")
	crypto := func(ref, to string, amount any) map[string]any {
		return map[string]any{"reference": ref, "amount": amount, "transactionType": "withdrawal",
			"blockchainDetails": map[string]any{"toAddress": to, "network": "BSC"}}
	}
	// The checks run in a fixed order: format, whitelist,
	// configuration.
	h.intent(cid, crypto("c-0", "0x123", 1000)).expect(t, 400, "toAddress must be 0x followed by 40 hexadecimal characters")
	h.intent(cid, crypto("c-1", "0x"+strings.Repeat("1", 40), 1000)).expect(t, 400, "Address is not whitelisted")

	rec := h.intent(cid, crypto("c-2", strings.ToLower(addr), 1000)).expect(t, 201, "").obj()
	if rec["fee"] != 0.0 || rec["blockchainDetails"].(map[string]any)["network"] != "BSC" || rec["withdrawalDetails"] != nil {
		t.Fatalf("crypto intent %v", rec)
	}
	if got := h.verify(cid, "c-2").expect(t, 200, "").obj(); got["status"] != "success" {
		t.Fatalf("crypto payout %v", got)
	}
	h.expectWallet(cid, 4000, 0)

	// Removing the address after staging stops the payout.
	h.intent(cid, crypto("c-3", addr, 500)).expect(t, 201, "")
	list := h.do(req{path: "/v1/whitelist-address", key: h.std(), cid: cid}).expect(t, 200, "").Data.([]any)
	id := list[0].(map[string]any)["id"].(string)
	h.do(req{method: "DELETE", path: "/v1/whitelist-address/" + id, key: h.std(), cid: cid}).expect(t, 200, "")
	h.verify(cid, "c-3").expect(t, 400, "Address is not whitelisted")
	h.expectWallet(cid, 4000, 0)

	// Without a master address the environment has no crypto.
	bare := newHarness(t)
	c2 := bare.funded("k2@x.com", "08031110021", 5000)
	bare.do(req{method: "POST", path: "/v1/whitelist-address", key: bare.std(), cid: c2,
		body: map[string]any{"walletAddress": addr, "network": "BSC"}}).expect(t, 201, "")
	bare.intent(c2, crypto("c-4", "0x"+strings.Repeat("1", 40), 1000)).expect(t, 400, "Address is not whitelisted")
	bare.intent(c2, crypto("c-5", addr, 1000)).expect(t, 400, "Crypto is not configured for this environment")
}

// TestMixedWorkloadZeroSum runs every kind of movement from many clients at
// once and checks the ledger's invariants and the customers' totals.
func TestMixedWorkloadZeroSum(t *testing.T) {
	h := newHarness(t)
	const n = 6
	var cids, phones []string
	for i := 0; i < n; i++ {
		phone := fmt.Sprintf("0803222%04d", i)
		cids = append(cids, h.funded(fmt.Sprintf("m%d@x.com", i), phone, 20000))
		phones = append(phones, phone)
	}
	good, failing := nuban(t, "058", "7", false), nuban(t, "058", "8", true)
	var mu sync.Mutex
	var withdrawn money.Amount // successful bank payouts incl. fee
	var deposited money.Amount
	parallel(n, func(i int) bool {
		cid := cids[i]
		for j := 0; j < 6; j++ {
			ref := fmt.Sprintf("mx-%d-%d", i, j)
			var body map[string]any
			switch j % 3 {
			case 0:
				body = map[string]any{"reference": ref, "amount": 1500.25, "transactionType": "deposit"}
			case 1:
				body = map[string]any{"reference": ref, "amount": 700, "transactionType": "wallet_transfer",
					"walletDetails": map[string]any{"phone": phones[(i+1)%n]}}
			case 2:
				acct := good
				if j == 5 {
					acct = failing
				}
				body = bankWithdrawal(ref, 900, acct)
			}
			if r := h.intent(cid, body); r.Status != 201 {
				t.Errorf("intent %s: %d %s", ref, r.Status, r.Raw)
				continue
			}
			r := h.verify(cid, ref)
			if r.Status != 200 {
				t.Errorf("verify %s: %d %s", ref, r.Status, r.Raw)
				continue
			}
			mu.Lock()
			switch rec := r.obj(); {
			case rec["transactionType"] == "deposit":
				deposited += money.Amount(150025)
			case rec["transactionType"] == "withdrawal" && rec["status"] == "success":
				withdrawn += money.Naira(950)
			}
			mu.Unlock()
		}
		return true
	})
	var total money.Amount
	for _, cid := range cids {
		m, e := h.wallet(cid)
		total += m + e
	}
	if want := money.Naira(n*20000) + deposited - withdrawn; total != want {
		t.Fatalf("customers hold %v, want %v", total, want)
	}
	h.assertZeroSum()
}

// Two customers of one merchant key using the same Idempotency-Key are two
// requests: each is executed and credited, neither is answered with the
// other's record, and each repeat replays its own.
func TestIdempotencyKeyIsPerCustomer(t *testing.T) {
	h := newHarness(t)
	a := h.createCustomer(h.sa(), "a@x.com", "08035557001")
	b := h.createCustomer(h.sa(), "b@x.com", "08035557002")
	key := map[string]string{"Idempotency-Key": "topup-1"}
	topUp := func(cid string) resp {
		return h.do(req{method: "POST", path: "/v1/payment/topup", key: h.std(), cid: cid, headers: key,
			body: map[string]any{"amount": 5000}}).expect(t, 200, "Wallet topped up successfully")
	}
	ra, rb := topUp(a), topUp(b)
	if rb.Header.Get("Idempotency-Replayed") != "" || rb.obj()["customerId"] != b || ra.obj()["customerId"] != a {
		t.Fatalf("customer b got %s (replayed %q), a got %s", rb.Raw, rb.Header.Get("Idempotency-Replayed"), ra.Raw)
	}
	h.expectWallet(a, 5000, 0)
	h.expectWallet(b, 5000, 0)
	for cid, first := range map[string]resp{a: ra, b: rb} {
		again := topUp(cid)
		if again.Header.Get("Idempotency-Replayed") != "true" || string(again.Raw) != string(first.Raw) {
			t.Fatalf("repeat for %s: %s, want the replay of %s", cid, again.Raw, first.Raw)
		}
	}
	h.expectWallet(a, 5000, 0)
	h.expectWallet(b, 5000, 0)
}

// payoutsFailingOnce: the provider does not answer the first payout, then
// pays; it records every record id it was asked to pay.
type payoutsFailingOnce struct {
	mu    sync.Mutex
	asked []string
}

func (p *payoutsFailingOnce) Send(ctx context.Context, w ledger.Record, _ string) (payment.PayoutAnswer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked = append(p.asked, w.ID)
	if len(p.asked) == 1 {
		return payment.PayoutAnswer{}, errors.New("provider timed out")
	}
	return payment.PayoutAnswer{Status: payment.ProviderSucceeded}, nil
}

// A payout whose provider does not answer leaves the debit standing and
// answers 503; the same verify (same Idempotency-Key) then runs again and
// finishes the payout, instead of replaying the 503 for 24 hours. The
// customer is debited once and the provider is asked twice for one record.
func TestUnansweredPayoutResumesUnderTheSameKey(t *testing.T) {
	h := newHarness(t)
	payouts := &payoutsFailingOnce{}
	h.svc.Gateways[domain.Test] = gateway.Set{Collection: gateway.TestCollection{}, Payouts: payouts}
	cid := h.funded("w@x.com", "08031117001", 10000)
	h.intent(cid, bankWithdrawal("wd-1", 1000, nuban(t, "058", "12", false))).expect(t, 201, "")
	key := map[string]string{"Idempotency-Key": "verify-wd-1"}
	verify := func() resp {
		return h.do(req{method: "POST", path: "/v1/payment/verify", key: h.std(), cid: cid, headers: key,
			body: map[string]any{"reference": "wd-1"}})
	}
	verify().expect(t, 503, "The payout provider did not answer; verify again later")
	h.expectWallet(cid, 8950, 0) // debited (amount + fee), payout unknown
	done := verify().expect(t, 200, "Payment verified successfully")
	if done.Header.Get("Idempotency-Replayed") != "" || done.obj()["status"] != "success" {
		t.Fatalf("second verify: replayed %q, %s", done.Header.Get("Idempotency-Replayed"), done.Raw)
	}
	h.expectWallet(cid, 8950, 0)
	if again := verify(); again.Header.Get("Idempotency-Replayed") != "true" || string(again.Raw) != string(done.Raw) {
		t.Fatalf("third verify: %s, want the replay of %s", again.Raw, done.Raw)
	}
	if len(payouts.asked) != 2 || payouts.asked[0] != payouts.asked[1] || payouts.asked[0] != done.obj()["id"] {
		t.Fatalf("provider asked for %v, want the record %v twice", payouts.asked, done.obj()["id"])
	}
	h.expectWallet(cid, 8950, 0)
}

// countingCollection is the test collection gateway, counting how often it
// is asked for deposit instructions.
type countingCollection struct {
	gateway.TestCollection
	asked atomic.Int64
}

func (c *countingCollection) Instructions(ctx context.Context, d ledger.Record) (*payment.TestAccount, error) {
	c.asked.Add(1)
	return c.TestCollection.Instructions(ctx, d)
}

// The collection gateway (which may open a bank account per call) is asked
// once per new deposit intent: not again by a repeat of the intent, nor by
// the refusal that a different request under the same reference gets.
func TestDepositInstructionsAreAskedOnce(t *testing.T) {
	h := newHarness(t)
	coll := &countingCollection{}
	h.svc.Gateways[domain.Test] = gateway.Set{Collection: coll, Payouts: gateway.TestPayouts{}}
	cid := h.createCustomer(h.sa(), "d@x.com", "08031117101")
	body := map[string]any{"reference": "dep-once", "amount": 2500, "transactionType": "deposit"}
	first := h.intent(cid, body).expect(t, 201, "")
	if first.obj()["testAccount"] == nil {
		t.Fatalf("no deposit instructions: %s", first.Raw)
	}
	again := h.intent(cid, body)
	if again.Status != 201 || fmt.Sprint(again.obj()["testAccount"]) != fmt.Sprint(first.obj()["testAccount"]) {
		t.Fatalf("repeat: %d %s, want the first instructions %v", again.Status, again.Raw, first.obj()["testAccount"])
	}
	if n := coll.asked.Load(); n != 1 {
		t.Fatalf("collection gateway asked %d times, want 1", n)
	}
}

// blockingPayouts holds every payout until release is closed, counting the
// calls; started gets one send per call.
type blockingPayouts struct {
	calls   atomic.Int64
	started chan struct{}
	release chan struct{}
}

func (p *blockingPayouts) Send(ctx context.Context, w ledger.Record, _ string) (payment.PayoutAnswer, error) {
	p.calls.Add(1)
	select {
	case p.started <- struct{}{}:
	default:
	}
	select {
	case <-p.release:
		return payment.PayoutAnswer{Status: payment.ProviderSucceeded}, nil
	case <-ctx.Done():
		return payment.PayoutAnswer{}, ctx.Err()
	}
}

// A second verify while the first is still asking the provider answers 503
// without asking it again (the payout lease); once the payout is over it
// answers the outcome. The provider is asked once, the customer debited once.
func TestVerifyDuringAPayoutAnswersInProgress(t *testing.T) {
	h := newHarness(t)
	payouts := &blockingPayouts{started: make(chan struct{}, 1), release: make(chan struct{})}
	h.svc.Gateways[domain.Test] = gateway.Set{Collection: gateway.TestCollection{}, Payouts: payouts}
	cid := h.funded("w@x.com", "08031117002", 10000)
	h.intent(cid, bankWithdrawal("wd-1", 1000, nuban(t, "058", "12", false))).expect(t, 201, "")
	verify := func() resp {
		return h.do(req{method: "POST", path: "/v1/payment/verify", key: h.std(), cid: cid, body: map[string]any{"reference": "wd-1"}})
	}
	first := make(chan resp, 1)
	go func() { first <- verify() }()
	<-payouts.started
	verify().expect(t, 503, "The payout is in progress; verify again later")
	close(payouts.release)
	done := (<-first).expect(t, 200, "Payment verified successfully")
	if done.obj()["status"] != "success" {
		t.Fatalf("first verify: %s", done.Raw)
	}
	if again := verify().expect(t, 200, "Payment verified successfully"); again.obj()["status"] != "success" {
		t.Fatalf("verify after the payout: %s", again.Raw)
	}
	if n := payouts.calls.Load(); n != 1 {
		t.Fatalf("provider asked %d times, want once", n)
	}
	h.expectWallet(cid, 8950, 0)
}

// Reference and Status complete gateway.Payouts: payoutsFailingOnce answers every send at
// once, so it is never asked where a payout stands.
func (p *payoutsFailingOnce) Reference(w ledger.Record) string { return w.ID }
func (p *payoutsFailingOnce) Status(context.Context, ledger.Record) (payment.PayoutAnswer, error) {
	return payment.PayoutAnswer{Status: payment.ProviderUnknown}, nil
}

// Reference and Status complete gateway.Payouts: blockingPayouts answers every send at
// once, so it is never asked where a payout stands.
func (p *blockingPayouts) Reference(w ledger.Record) string { return w.ID }
func (p *blockingPayouts) Status(context.Context, ledger.Record) (payment.PayoutAnswer, error) {
	return payment.PayoutAnswer{Status: payment.ProviderUnknown}, nil
}
