package httpapi

import (
	"encoding/json"
	"fmt"
	"testing"
)

// TestEscrowPaymentDetails: the record of a payment that
// funds one escrow describes it in escrowDetails (paymentToken, purpose,
// amount, fee, beneficiary = the seller); several escrows: escrows, one
// object each, beside escrowIds and paymentTokens. The payment history
// shows the same.
func TestEscrowPaymentDetails(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035550001")
	buyer := h.funded("b@x.com", "08035550002", 50000)
	one := h.createEscrow(seller, map[string]string{"amount": "10000", "purpose": "Phone", "whoPays": "buyer"}, 0).expect(t, 201, "").obj()
	paid := h.pay(buyer, "pay-one", 10250, one["id"]).expect(t, 200, "Payment successful").obj()
	d := paid["escrowDetails"].(map[string]any)
	want := map[string]any{"escrowIds": []any{one["id"]}, "paymentTokens": []any{one["paymentToken"]},
		"paymentToken": one["paymentToken"], "purpose": "Phone", "amount": 10000.0, "fee": 250.0,
		"beneficiary": map[string]any{"name": "Ada Obi", "phone": "08035550001"}}
	if fmt.Sprint(d) != fmt.Sprint(want) {
		t.Fatalf("escrowDetails %v\nwant %v", d, want)
	}

	// Two escrows, one sold by the merchant itself (no phone).
	a := h.createEscrow(seller, map[string]string{"amount": "2000", "purpose": "Case", "whoPays": "seller"}, 0).expect(t, 201, "").obj()
	b := h.createEscrow("", map[string]string{"amount": "4000", "purpose": "Charger", "whoPays": "both"}, 0).expect(t, 201, "").obj()
	paid = h.pay(buyer, "pay-two", 6050, []any{a["id"], b["id"]}).expect(t, 200, "Payment successful").obj()
	d = paid["escrowDetails"].(map[string]any)
	escrows, _ := d["escrows"].([]any)
	if len(escrows) != 2 || d["paymentToken"] != nil || len(d["escrowIds"].([]any)) != 2 {
		t.Fatalf("escrowDetails %v", d)
	}
	wantTwo := []map[string]any{
		{"paymentToken": a["paymentToken"], "purpose": "Case", "amount": 2000.0, "fee": 50.0,
			"beneficiary": map[string]any{"name": "Ada Obi", "phone": "08035550001"}},
		{"paymentToken": b["paymentToken"], "purpose": "Charger", "amount": 4000.0, "fee": 100.0,
			"beneficiary": map[string]any{"name": "Shop", "phone": ""}},
	}
	for i, w := range wantTwo {
		if fmt.Sprint(escrows[i]) != fmt.Sprint(w) {
			t.Fatalf("escrows[%d] %v\nwant %v", i, escrows[i], w)
		}
	}
	// The history keeps them.
	hist := h.do(req{path: "/v1/payment/history?type=escrow", key: h.std(), cid: buyer}).expect(t, 200, "")
	var env struct {
		Data struct {
			Data []struct {
				Reference     string         `json:"reference"`
				EscrowDetails map[string]any `json:"escrowDetails"`
			} `json:"data"`
		} `json:"data"`
	}
	if err := json.Unmarshal(hist.Raw, &env); err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, r := range env.Data.Data {
		switch r.Reference {
		case "pay-one":
			found++
			if fmt.Sprint(r.EscrowDetails) != fmt.Sprint(want) {
				t.Fatalf("history pay-one %v", r.EscrowDetails)
			}
		case "pay-two":
			found++
			if len(r.EscrowDetails["escrows"].([]any)) != 2 {
				t.Fatalf("history pay-two %v", r.EscrowDetails)
			}
		}
	}
	if found != 2 {
		t.Fatalf("history %s", hist.Raw)
	}
}

// TestTopUpAnswersMainBalance: the balance after the
// credit, not the amount credited.
func TestTopUpAnswersMainBalance(t *testing.T) {
	h := newHarness(t)
	cid := h.funded("b@x.com", "08035550002", 0)
	other := h.funded("c@x.com", "08035550003", 20000)
	h.do(req{method: "POST", path: "/v1/payment/create-intent", key: h.std(), cid: other, body: map[string]any{
		"amount": 1000, "reference": "tr-1", "transactionType": "wallet_transfer",
		"walletDetails": map[string]any{"phone": "08035550002"}}}).expect(t, 201, "")
	h.verify(other, "tr-1").expect(t, 200, "")
	r := h.topUp(cid, 2500.5).expect(t, 200, "Wallet topped up successfully").obj()
	if r["mainBalance"] != 3500.5 || r["amount"] != 2500.5 || r["transactionType"] != "deposit" {
		t.Fatalf("top-up %v", r)
	}
	h.expectWallet(cid, 3500.5, 0)
}
