package httpapi

import (
	"context"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/internal/audit"
)

func (h *harness) partialRefund(id string, amount any, headers map[string]string) resp {
	return h.do(req{method: "POST", path: "/v1/escrow/refund/" + id, key: h.std(), body: map[string]any{"amount": amount},
		headers: headers})
}

// The merchant refunds part of an ONGOING escrow, then part of it once
// disputed; the resolution settles what is left. Each refund moves the
// money once (a repeated Idempotency-Key answers the first result), is a
// refund record of the buyer's, and is announced by escrow.partially_refunded
// and payment.refund.success; the audit finds the read models as the
// events say.
func TestPartialRefundEndToEnd(t *testing.T) {
	h := newWebhookHarness(t)
	rc := newHookReceiver(t, h.m.SigningSecrets[domain.Test], 0)
	h.do(req{method: "PUT", path: "/v1/merchant/webhook", key: h.sa(), body: map[string]any{"url": rc.srv.URL}}).expect(t, 200, "")
	seller := h.createCustomer(h.sa(), "s@x.com", "08035551001")
	buyer := h.funded("b@x.com", "08035551002", 10250)
	e := h.createEscrow(seller, map[string]string{"amount": "10000", "purpose": "Phone", "whoPays": "buyer"}, 0).
		expect(t, 201, "Escrow created successfully").obj()
	id, token := e["id"].(string), e["paymentToken"].(string)
	if e["refundedAmount"] != 0.0 {
		t.Fatalf("created escrow %v: want refundedAmount 0", e)
	}

	h.partialRefund(id, 100, nil).expect(t, 400, "Action not allowed") // unpaid
	h.pay(buyer, "pr-1", 10250, id).expect(t, 200, "Payment successful")
	h.do(req{method: "POST", path: "/v1/escrow/refund/" + id, key: h.std(), cid: buyer, body: map[string]any{"amount": 100}}).
		expect(t, 400, "customer-id is not allowed in request header")
	h.do(req{method: "POST", path: "/v1/escrow/refund/" + id, key: h.std(), body: map[string]any{}}).expect(t, 400, "amount is required")
	h.partialRefund(id, 10000, nil).expect(t, 400, "amount must be less than the held amount of 10000")
	h.expectWallet(buyer, 0, 10250)

	key := map[string]string{"Idempotency-Key": "refund-once"}
	first := h.partialRefund(id, 3000.5, key).expect(t, 200, "Escrow partially refunded successfully")
	if v := first.obj(); v["status"] != "ONGOING" || v["refundedAmount"] != 3000.5 {
		t.Fatalf("after the refund: %v", v)
	}
	if again := h.partialRefund(id, 3000.5, key).expect(t, 200, ""); string(again.Raw) != string(first.Raw) {
		t.Fatalf("replayed refund %s, first %s", again.Raw, first.Raw)
	}
	h.expectWallet(buyer, 3000.5, 7249.5)
	h.partialRefund(id, 6999.5, nil).expect(t, 400, "amount must be less than the held amount of 6999.5")

	// Disputed: refundable again; the resolution pays the seller the rest.
	h.submitDispute(token, buyer, "Scratched").expect(t, 200, "")
	h.partialRefund(id, 999.5, nil).expect(t, 200, "Escrow partially refunded successfully")
	h.expectWallet(buyer, 4000, 6250)
	h.resolveDispute(id, map[string]any{"status": "SPLIT", "sellerAmount": 6000, "buyerAmount": 1000}).
		expect(t, 400, "sellerAmount and buyerAmount must add up to the held amount of 6000")
	h.resolveDispute(id, map[string]any{"status": "COMPLETED"}).expect(t, 200, "Dispute resolved successfully")
	h.partialRefund(id, 1, nil).expect(t, 400, "Action not allowed")
	v := h.viewEscrow(token, "")
	if v["status"] != "COMPLETED" || v["refundedAmount"] != 4000.0 {
		t.Fatalf("settled escrow %v", v)
	}
	h.expectWallet(buyer, 4000, 0)
	h.expectWallet(seller, 6000, 0)
	h.expectMerchant(125, 0)
	h.expectPlatform(125)
	if got := h.historyTotals(buyer); got["refund"] != money.Naira(4000) {
		t.Fatalf("buyer's history %v: want refunds of 4000", got)
	}
	h.do(req{path: "/v1/payment/history?transactionType=refund", key: h.std(), cid: buyer}).expect(t, 200, "")

	hits := h.allWebhooks(rc)
	events := map[string]int{}
	for _, hh := range hits {
		events[hh.Event]++
	}
	if events["escrow.partially_refunded"] != 2 || events["payment.refund.success"] != 2 || events["escrow.completed"] != 1 {
		t.Fatalf("webhooks %v: want two partial refunds, each with its record, and one completion", events)
	}
	paymentPayloads(t, hits, h.apiRecords(buyer, seller), nil)
	h.assertZeroSum()
	rep, err := audit.Run(context.Background(), h.store, h.pool, h.m.MerchantID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Differences) != 0 {
		t.Fatalf("audit differences: %+v", rep.Differences)
	}
}

// Only a standard escrow is refunded in part.
func TestPartialRefundOfAMilestoneEscrowIsRefused(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035551001")
	buyer := h.funded("b@x.com", "08035551002", 10250)
	e := h.createMilestones(seller, map[string]any{"amount": 10000, "purpose": "Site", "whoPays": "buyer",
		"milestones": []map[string]any{{"title": "a", "amount": 4000}, {"title": "b", "amount": 6000}}}).expect(t, 201, "").obj()
	h.pay(buyer, "prm-1", 10250, e["id"]).expect(t, 200, "Payment successful")
	h.partialRefund(e["id"].(string), 100, nil).expect(t, 400, "Only a standard escrow can be partially refunded")
	h.expectWallet(buyer, 0, 10250)
}
