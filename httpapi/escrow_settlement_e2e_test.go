package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain/money"
)

// Settlement tests: exact balances of buyer, seller, merchant and platform
// after every step of the fee rules' paths.

// platformRevenue is the platform's fee income from the harness merchant,
// read from the ledger read model (no route shows it).
func (h *harness) platformRevenue() money.Amount {
	h.t.Helper()
	h.caughtUp()
	var kobo int64
	if err := h.api.queries.Pool().QueryRow(context.Background(),
		`SELECT coalesce(sum(balance), 0) FROM rm_balances WHERE merchant_id = $1 AND holder = 'platform' AND bucket = 'revenue'`,
		h.m.MerchantID).Scan(&kobo); err != nil {
		h.t.Fatal(err)
	}
	return money.Amount(kobo)
}

func (h *harness) expectPlatform(want any) {
	h.t.Helper()
	if got := h.platformRevenue(); got != h.amount(want) {
		h.t.Fatalf("platform revenue %s, want %s", got, h.amount(want))
	}
}

// viewEscrow is GET /v1/escrow/verify/{token} as cid ("" = the merchant).
func (h *harness) viewEscrow(token, cid string) map[string]any {
	h.t.Helper()
	return h.do(req{path: "/v1/escrow/verify/" + token, key: h.std(), cid: cid}).expect(h.t, 200, "Escrow fetched successfully").obj()
}

// merchantLedger is the merchant's whole ledger (GET
// /v1/merchant/transactions): count and exact total of each record type,
// amounts read as the decimals they are written in (never via float64).
func (h *harness) merchantLedger() (count map[string]int, total map[string]money.Amount) {
	h.t.Helper()
	r := h.do(req{path: "/v1/merchant/transactions?limit=100", key: h.sa()}).expect(h.t, 200, "")
	var env struct {
		Data struct {
			Data []struct {
				Type   string      `json:"transactionType"`
				Amount json.Number `json:"amount"`
			} `json:"data"`
			Pagination struct {
				Count      int64 `json:"count"`
				IsLastPage bool  `json:"isLastPage"`
			} `json:"pagination"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.Raw, &env); err != nil {
		h.t.Fatalf("merchant transactions: %v: %s", err, r.Raw)
	}
	if !env.Data.Pagination.IsLastPage || env.Data.Pagination.Count != int64(len(env.Data.Data)) {
		h.t.Fatalf("merchant transactions: %d rows of %d, isLastPage %v: not the whole ledger",
			len(env.Data.Data), env.Data.Pagination.Count, env.Data.Pagination.IsLastPage)
	}
	count, total = map[string]int{}, map[string]money.Amount{}
	for _, rec := range env.Data.Data {
		a, err := money.Parse(rec.Amount.String())
		if err != nil {
			h.t.Fatalf("merchant record amount %q: %v", rec.Amount, err)
		}
		count[rec.Type]++
		total[rec.Type] += a
	}
	return count, total
}

// merchantEarnings sums the merchant ledger's commission and delivery
// records: count and exact total of each type.
func (h *harness) merchantEarnings() (count map[string]int, total map[string]money.Amount) {
	h.t.Helper()
	all, sums := h.merchantLedger()
	count, total = map[string]int{}, map[string]money.Amount{}
	for _, typ := range []string{"commission", "delivery"} {
		if all[typ] > 0 {
			count[typ], total[typ] = all[typ], sums[typ]
		}
	}
	return count, total
}

// passClaimWindow moves the engine's clock past a one-minute delivery
// window.
func (h *harness) passClaimWindow() {
	h.svc.Engine.Now = func() time.Time { return time.Now().UTC().Add(61 * time.Second) }
}

func TestEscrowMultiQuantitySettlement(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035551001")
	b1 := h.funded("b1@x.com", "08035551002", 10000)
	b2 := h.funded("b2@x.com", "08035551003", 10000)
	poor := h.funded("p@x.com", "08035551004", 1000)
	// amount 2,000, both pay: fee 50 (25 each), commission 25, platform 25;
	// additional fee 100: each buyer is due 2,125.
	link := h.createEscrow(seller, map[string]string{"amount": "2000", "purpose": "Bag", "whoPays": "both",
		"totalQuantity": "3", "maxDelivery": "1", "deliveryTimeline": "minutes"}, 0).expect(t, 201, "Escrow created successfully").obj()
	lid, ltok := link["id"].(string), link["paymentToken"].(string)
	h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + ltok, key: h.sa(), body: map[string]any{"additionalFee": 100}}).
		expect(t, 200, "Additional fee updated successfully")
	stock := func(want float64) {
		t.Helper()
		v := h.viewEscrow(ltok, "")
		if v["totalQuantity"] != want || v["status"] != "PENDING" || v["state"] != "AWAITING_PAYMENT" || v["buyerId"] != nil {
			t.Fatalf("link after sales: %v, want totalQuantity %v", v, want)
		}
	}

	// Failed payments consume no stock and move no money.
	h.pay(b1, "m-bad", 2124, lid).expect(t, 400, "Amount mismatch")
	h.pay(poor, "m-poor", 2125, lid).expect(t, 400, "Insufficient balance")
	stock(3)
	h.expectWallet(b1, 10000, 0)
	h.expectWallet(poor, 1000, 0)
	h.expectMerchant(0, 0)

	clone := func(r resp, buyer string) map[string]any {
		t.Helper()
		c := r.obj()["escrows"].([]any)[0].(map[string]any)
		if c["id"] == lid || c["paymentToken"] == ltok || c["parentId"] != lid || c["totalQuantity"] != 1.0 ||
			c["buyerId"] != buyer || c["status"] != "ONGOING" || c["state"] != "OPENED" || c["additionalFee"] != 100.0 || c["fee"] != 50.0 {
			t.Fatalf("clone %v", c)
		}
		return c
	}
	c1 := clone(h.pay(b1, "m-1", 2125, lid).expect(t, 200, "Payment successful"), b1)
	h.expectWallet(b1, 7875, 2025)
	h.expectMerchant(0, 100)
	stock(2)
	c2 := clone(h.pay(b2, "m-2", 2125, lid).expect(t, 200, "Payment successful"), b2)
	if c1["id"] == c2["id"] {
		t.Fatalf("both buyers funded clone %v", c1["id"])
	}
	h.expectWallet(b2, 7875, 2025)
	h.expectMerchant(0, 200)
	h.expectPlatform(0)
	stock(1)

	// Buyer 1 confirms its clone: only that clone settles.
	h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + c1["id"].(string), key: h.std(), cid: b2}).expect(t, 400, "Action not allowed")
	done := h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + c1["id"].(string), key: h.std(), cid: b1}).
		expect(t, 200, "Payment confirmed successfully").obj()
	if done["status"] != "COMPLETED" || done["state"] != "CLOSED" {
		t.Fatalf("confirmed clone %v", done)
	}
	h.expectWallet(b1, 7875, 0)
	h.expectWallet(b2, 7875, 2025)
	h.expectWallet(seller, 1975, 0)
	h.expectMerchant(125, 100)
	h.expectPlatform(25)

	// The seller claims buyer 2's clone after the window.
	c2tok := c2["paymentToken"].(string)
	h.do(req{path: "/v1/escrow/claim-funds/" + c2tok, key: h.std(), cid: seller}).expect(t, 400, "Escrow cannot be claimed yet")
	h.passClaimWindow()
	claimed := h.do(req{path: "/v1/escrow/claim-funds/" + c2tok, key: h.std(), cid: seller}).expect(t, 200, "Funds claimed successfully").obj()
	if claimed["status"] != "CLAIMED" || claimed["state"] != "CLOSED" || claimed["approvedClaimBy"] != seller {
		t.Fatalf("claimed clone %v", claimed)
	}
	h.expectWallet(b1, 7875, 0)
	h.expectWallet(b2, 7875, 0)
	h.expectWallet(seller, 3950, 0)
	h.expectMerchant(250, 0)
	h.expectPlatform(50)

	// Settled clones and the unsold link move nothing more.
	h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + c1["id"].(string), key: h.std(), cid: b1}).expect(t, 400, "Action not allowed")
	h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + c2["id"].(string), key: h.std(), cid: b2}).expect(t, 400, "Action not allowed")
	h.do(req{path: "/v1/escrow/claim-funds/" + c2tok, key: h.std(), cid: seller}).expect(t, 400, "Action not allowed")
	h.do(req{path: "/v1/escrow/claim-funds/" + ltok, key: h.std(), cid: seller}).expect(t, 400, "Action not allowed")
	h.expectWallet(seller, 3950, 0)
	h.expectMerchant(250, 0)
	h.expectPlatform(50)
	stock(1)

	// Commission once per clone, the additional fee once per clone.
	count, total := h.merchantEarnings()
	if count["commission"] != 2 || total["commission"] != h.amount(50) || count["delivery"] != 2 || total["delivery"] != h.amount(200) {
		t.Fatalf("merchant earnings %v %v", count, total)
	}
	h.assertZeroSum()
}

func TestEscrowSettlementBalanceMatrix(t *testing.T) {
	for _, tc := range []struct {
		path       string // confirm or claim
		whoPays    string
		amount     float64
		additional float64
		fee, buyer float64 // escrow fee and the buyer's share of it
	}{
		{"confirm", "seller", 10000, 400, 250, 0},
		{"confirm", "both", 1300, 100, 33, 16.5}, // 32.5 rounds half-up to 33
		{"claim", "buyer", 10000, 0, 250, 250},
		{"claim", "buyer", 10000, 500, 250, 250},
		{"claim", "seller", 10000, 0, 250, 0},
		{"claim", "seller", 10000, 400, 250, 0},
		{"claim", "both", 1300, 0, 33, 16.5},
		{"claim", "both", 1300, 250, 33, 16.5},
	} {
		t.Run(fmt.Sprintf("%s/%s+%v", tc.path, tc.whoPays, tc.additional), func(t *testing.T) {
			h := newHarness(t)
			seller := h.createCustomer(h.sa(), "s@x.com", "08035552001")
			buyer := h.funded("b@x.com", "08035552002", 20000)
			commission := tc.fee / 2
			due, held, payout := tc.amount+tc.buyer+tc.additional, tc.amount+tc.buyer, tc.amount-(tc.fee-tc.buyer)

			e := h.createEscrow(seller, map[string]string{"amount": fmt.Sprint(tc.amount), "purpose": "Goods", "whoPays": tc.whoPays,
				"maxDelivery": "1", "deliveryTimeline": "minutes"}, 0).expect(t, 201, "Escrow created successfully").obj()
			if e["fee"] != tc.fee {
				t.Fatalf("fee %v, want %v", e["fee"], tc.fee)
			}
			id, token := e["id"].(string), e["paymentToken"].(string)
			if tc.additional > 0 {
				h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + token, key: h.sa(),
					body: map[string]any{"additionalFee": tc.additional}}).expect(t, 200, "Additional fee updated successfully")
			}
			h.pay(buyer, "bad", due-0.01, id).expect(t, 400, "Amount mismatch")
			h.expectWallet(buyer, 20000, 0)
			h.pay(buyer, "pay", due, id).expect(t, 200, "Payment successful")
			h.expectWallet(buyer, 20000-due, held)
			h.expectWallet(seller, 0, 0)
			h.expectMerchant(0, tc.additional)
			h.expectPlatform(0)

			var out map[string]any
			if tc.path == "confirm" {
				out = h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + id, key: h.std(), cid: buyer}).
					expect(t, 200, "Payment confirmed successfully").obj()
				if out["status"] != "COMPLETED" || out["approvedClaimBy"] != nil {
					t.Fatalf("confirmed %v", out)
				}
			} else {
				h.do(req{path: "/v1/escrow/claim-funds/" + token, key: h.std(), cid: seller}).expect(t, 400, "Escrow cannot be claimed yet")
				h.expectWallet(seller, 0, 0)
				h.passClaimWindow()
				h.do(req{path: "/v1/escrow/claim-funds/" + token, key: h.std(), cid: buyer}).expect(t, 400, "Action not allowed")
				out = h.do(req{path: "/v1/escrow/claim-funds/" + token, key: h.std(), cid: seller}).
					expect(t, 200, "Funds claimed successfully").obj()
				if out["status"] != "CLAIMED" || out["approvedClaimBy"] != seller || fmt.Sprint(out["logs"]) != "[PENDING ONGOING CLAIMED]" {
					t.Fatalf("claimed %v", out)
				}
				// The buyer can no longer confirm a claimed escrow.
				h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + id, key: h.std(), cid: buyer}).expect(t, 400, "Action not allowed")
			}
			if out["state"] != "CLOSED" || out["completedAt"] == nil || out["additionalFee"] != tc.additional {
				t.Fatalf("settled %v", out)
			}
			h.expectWallet(buyer, 20000-due, 0)
			h.expectWallet(seller, payout, 0)
			h.expectMerchant(commission+tc.additional, 0)
			h.expectPlatform(tc.fee - commission)

			count, total := h.merchantEarnings()
			wantDelivery := 0
			if tc.additional > 0 {
				wantDelivery = 1
			}
			if count["commission"] != 1 || total["commission"] != h.amount(commission) || count["delivery"] != wantDelivery || total["delivery"] != h.amount(tc.additional) {
				t.Fatalf("merchant earnings %v %v", count, total)
			}
			h.assertZeroSum()
		})
	}
}

func TestEscrowIntentAmountRecheck(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035553001")
	buyer := h.funded("b@x.com", "08035553002", 10000)

	// A single escrow: 2,000, buyer pays, due 2,050 when staged.
	e := h.createEscrow(seller, map[string]string{"amount": "2000", "purpose": "x", "whoPays": "buyer"}, 0).expect(t, 201, "").obj()
	id, token := e["id"].(string), e["paymentToken"].(string)
	h.intent(buyer, map[string]any{"reference": "re-1", "amount": 2050, "transactionType": "escrow",
		"escrowDetails": map[string]any{"escrowId": id}}).expect(t, 201, "Payment intent created successfully")
	h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + token, key: h.sa(), body: map[string]any{"additionalFee": 300}}).
		expect(t, 200, "Additional fee updated successfully")
	for i := 0; i < 2; i++ { // a retry is refused the same way: nothing was half-applied
		h.verify(buyer, "re-1").expect(t, 400, "Amount mismatch")
		h.expectWallet(buyer, 10000, 0)
		h.expectMerchant(0, 0)
		v := h.viewEscrow(token, buyer)
		if v["status"] != "PENDING" || v["state"] != "AWAITING_PAYMENT" || v["paidAt"] != nil || v["buyerId"] != nil || v["paymentId"] != nil {
			t.Fatalf("escrow after refused verify %v", v)
		}
	}

	// A multi-unit link: the refused verify takes no unit either.
	link := h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer", "totalQuantity": "2"}, 0).
		expect(t, 201, "").obj()
	lid, ltok := link["id"].(string), link["paymentToken"].(string)
	h.intent(buyer, map[string]any{"reference": "re-2", "amount": 1025, "transactionType": "escrow",
		"escrowDetails": map[string]any{"escrowId": lid}}).expect(t, 201, "")
	h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + ltok, key: h.sa(), body: map[string]any{"additionalFee": 50}}).
		expect(t, 200, "")
	h.verify(buyer, "re-2").expect(t, 400, "Amount mismatch")
	if v := h.viewEscrow(ltok, ""); v["totalQuantity"] != 2.0 || v["status"] != "PENDING" {
		t.Fatalf("link after refused verify %v", v)
	}
	h.expectWallet(buyer, 10000, 0)
	h.expectMerchant(0, 0)

	// Staged at the new total, it pays.
	h.intent(buyer, map[string]any{"reference": "re-3", "amount": 1075, "transactionType": "escrow",
		"escrowDetails": map[string]any{"escrowId": lid}}).expect(t, 201, "")
	h.verify(buyer, "re-3").expect(t, 200, "Payment verified successfully")
	h.expectWallet(buyer, 8925, 1025)
	h.expectMerchant(0, 50)
	if v := h.viewEscrow(ltok, ""); v["totalQuantity"] != 1.0 {
		t.Fatalf("link after sale %v", v)
	}
	h.assertZeroSum()
}
