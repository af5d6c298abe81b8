package httpapi

import (
	"testing"
)

// TestUpperCaseEnumerations: the public API's
// documentation spells enumerations in upper case; requests match them
// ignoring case and responses keep this service's spelling.
func TestUpperCaseEnumerations(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035550001")
	buyer := h.funded("b@x.com", "08035550002", 20000)
	e := h.createEscrow(seller, map[string]string{"amount": "10000", "purpose": "Phone", "whoPays": "BUYER",
		"deliveryTimeline": "Hours", "maxDelivery": "3"}, 0).expect(t, 201, "Escrow created successfully").obj()
	if e["whoPays"] != "buyer" || e["deliveryTimeline"] != "hours" {
		t.Fatalf("escrow %v", e)
	}
	paid := h.do(req{method: "POST", path: "/v1/payment/escrow", key: h.std(), cid: buyer, body: map[string]any{
		"amount": 10250, "reference": "pay-upper", "transactionType": "ESCROW", "gateway": "WALLET",
		"escrowDetails": map[string]any{"escrowId": e["id"]}}}).expect(t, 200, "Payment successful").obj()
	if paid["transactionType"] != "escrow" {
		t.Fatalf("payment %v", paid)
	}
	h.do(req{method: "POST", path: "/v1/payment/escrow", key: h.std(), cid: buyer, body: map[string]any{
		"amount": 10250, "reference": "pay-card", "transactionType": "Escrow", "gateway": "CARD",
		"escrowDetails": map[string]any{"escrowId": e["id"]}}}).expect(t, 403, "This feature is not enabled on your merchant account")
	rows, _ := h.escrowPage("/v1/escrow/transactions?type=SALES", seller, "Transaction fetched successfully")
	if len(rows) != 1 || rows[0]["id"] != e["id"] {
		t.Fatalf("sales %v", rows)
	}
	rows, _ = h.escrowPage("/v1/escrow/transactions?type=Buy", buyer, "Transaction fetched successfully")
	if len(rows) != 1 || rows[0]["id"] != e["id"] {
		t.Fatalf("buys %v", rows)
	}
	in := h.intent(buyer, map[string]any{"amount": 5000, "reference": "dep-upper", "transactionType": "DEPOSIT"}).
		expect(t, 201, "").obj()
	if in["transactionType"] != "deposit" {
		t.Fatalf("intent %v", in)
	}
	hist := h.do(req{path: "/v1/payment/history?type=ESCROW", key: h.std(), cid: buyer}).expect(t, 200, "")
	list, _ := hist.obj()["data"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["reference"] != "pay-upper" {
		t.Fatalf("history %s", hist.Raw)
	}
	// "transfer" is a value of the public enumeration that no record here
	// carries: filtering by it is valid, and finds nothing.
	hist = h.do(req{path: "/v1/payment/history?type=Transfer", key: h.std(), cid: buyer}).expect(t, 200, "")
	if list, _ := hist.obj()["data"].([]any); len(list) != 0 {
		t.Fatalf("history of transfers %s", hist.Raw)
	}
	// Still refused by name: a value of no enumeration.
	h.intent(buyer, map[string]any{"amount": 5000, "reference": "dep-bad", "transactionType": "LOAN"}).
		expect(t, 400, "transactionType must be one of deposit, withdrawal, wallet_transfer, escrow")
}
