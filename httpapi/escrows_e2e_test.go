package httpapi

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/domain/money"
)

// escrowForm builds a real multipart/form-data body with fields and
// n PNG images under imageUrl.
func escrowForm(t *testing.T, fields map[string]string, images int) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for k, v := range fields {
		if err := w.WriteField(k, v); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < images; i++ {
		part, err := w.CreateFormFile("imageUrl", fmt.Sprintf("photo%d.png", i))
		if err != nil {
			t.Fatal(err)
		}
		img := image.NewRGBA(image.Rect(0, 0, 2+i, 2))
		if err := png.Encode(part, img); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), w.FormDataContentType()
}

func (h *harness) createEscrow(cid string, fields map[string]string, images int) resp {
	h.t.Helper()
	body, ct := escrowForm(h.t, fields, images)
	return h.do(req{method: "POST", path: "/v1/escrow/create", key: h.std(), cid: cid, body: body,
		headers: map[string]string{"Content-Type": ct}})
}

func (h *harness) merchantBalance() (main, escrow money.Amount) {
	h.t.Helper()
	return h.balances(h.do(req{path: "/v1/merchant/balance", key: h.sa()}).expect(h.t, 200, ""))
}

func (h *harness) expectMerchant(main, escrow any) {
	h.t.Helper()
	if m, e := h.merchantBalance(); m != h.amount(main) || e != h.amount(escrow) {
		h.t.Fatalf("merchant wallet main %s escrow %s, want %s %s", m, e, h.amount(main), h.amount(escrow))
	}
}

func (h *harness) pay(cid string, ref string, amount any, ids any) resp {
	h.t.Helper()
	return h.do(req{method: "POST", path: "/v1/payment/escrow", key: h.std(), cid: cid, body: map[string]any{
		"amount": amount, "reference": ref, "transactionType": "escrow", "gateway": "wallet",
		"escrowDetails": map[string]any{"escrowId": ids}}})
}

func TestEscrowLifecycleBalances(t *testing.T) {
	for _, tc := range []struct {
		whoPays                       string
		additional                    float64
		due, sellerGets, merchantMain float64
	}{
		// amount 10,000: fee 250 (2.5%), commission 125.
		{"buyer", 0, 10250, 10000, 125},
		{"seller", 0, 10000, 9750, 125},
		{"both", 0, 10125, 9875, 125},
		{"buyer", 500, 10750, 10000, 625},
		{"both", 300, 10425, 9875, 425},
	} {
		t.Run(fmt.Sprintf("%s+%v", tc.whoPays, tc.additional), func(t *testing.T) {
			h := newHarness(t)
			seller := h.createCustomer(h.sa(), "s@x.com", "08035550001")
			buyer := h.funded("b@x.com", "08035550002", 20000)
			e := h.createEscrow(seller, map[string]string{"amount": "10000", "purpose": "Phone", "whoPays": tc.whoPays,
				"description": "A used phone", "maxDelivery": "3", "deliveryTimeline": "days"}, 2).
				expect(t, 201, "Escrow created successfully").obj()
			if e["state"] != "AWAITING_PAYMENT" || e["status"] != "PENDING" || e["fee"] != 250.0 || e["additionalFee"] != 0.0 ||
				len(e["imageUrl"].([]any)) != 2 || !strings.HasPrefix(e["paymentToken"].(string), "PY_") || e["isSeller"] != true ||
				e["settlementType"] != "STANDARD" || e["paidAt"] != nil || e["sellerId"] != seller {
				t.Fatalf("created escrow %v", e)
			}
			token, id := e["paymentToken"].(string), e["id"].(string)
			// Images are served back without a key, with the sniffed type.
			img, err := http.Get(e["imageUrl"].([]any)[0].(string))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(img.Body)
			img.Body.Close()
			if img.StatusCode != 200 || img.Header.Get("Content-Type") != "image/png" || len(b) == 0 {
				t.Fatalf("image: %d %s", img.StatusCode, img.Header.Get("Content-Type"))
			}
			if tc.additional > 0 {
				h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + token, key: h.sa(),
					body: map[string]any{"additionalFee": tc.additional}}).expect(t, 200, "Additional fee updated successfully")
			}
			h.pay(buyer, "pay-1", tc.due+1, id).expect(t, 400, "Amount mismatch")
			paid := h.pay(buyer, "pay-2", tc.due, id).expect(t, 200, "Payment successful").obj()
			if paid["transactionType"] != "escrow" || paid["status"] != "success" || paid["amount"] != tc.due {
				t.Fatalf("payment record %v", paid)
			}
			esc := paid["escrows"].([]any)[0].(map[string]any)
			if esc["status"] != "ONGOING" || esc["state"] != "OPENED" || esc["paidAt"] == nil || esc["buyerId"] != buyer {
				t.Fatalf("funded escrow %v", esc)
			}
			held := 10000.0
			if tc.whoPays == "buyer" {
				held += 250
			} else if tc.whoPays == "both" {
				held += 125
			}
			h.expectWallet(buyer, 20000-tc.due, held)
			h.expectMerchant(0, tc.additional)
			// A repeat of the payment request moves nothing.
			h.pay(buyer, "pay-2", tc.due, id).expect(t, 200, "Payment successful")
			h.expectWallet(buyer, 20000-tc.due, held)
			h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + token, key: h.sa(), body: map[string]any{"additionalFee": 1}}).
				expect(t, 400, "An additional fee can only be updated while the escrow is pending payment")

			h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + id, key: h.std(), cid: seller}).expect(t, 400, "Action not allowed")
			done := h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + id, key: h.std(), cid: buyer}).
				expect(t, 200, "Payment confirmed successfully").obj()
			if done["status"] != "COMPLETED" || done["state"] != "CLOSED" || done["completedAt"] == nil ||
				fmt.Sprint(done["logs"]) != "[PENDING ONGOING COMPLETED]" {
				t.Fatalf("completed escrow %v", done)
			}
			h.expectWallet(buyer, 20000-tc.due, 0)
			h.expectWallet(seller, tc.sellerGets, 0)
			h.expectMerchant(tc.merchantMain, 0)
			// The platform keeps fee − commission = 250 − 125.
			h.expectPlatform(250 - 125)
			h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + id, key: h.std(), cid: buyer}).expect(t, 400, "Action not allowed")
			h.expectWallet(seller, tc.sellerGets, 0)
			h.expectPlatform(250 - 125)

			// The merchant's ledger: commission and (when set) delivery,
			// amounts read exactly.
			counts, types := h.merchantLedger()
			if types["commission"] != h.amount(125) || types["delivery"] != h.amount(tc.additional) {
				t.Fatalf("merchant ledger %v", types)
			}
			// One commission record for the one settled escrow; one delivery
			// record exactly when an additional fee is set; nothing else.
			wantDelivery := 0
			if tc.additional > 0 {
				wantDelivery = 1
			}
			if counts["commission"] != 1 || counts["delivery"] != wantDelivery || len(counts) != 1+wantDelivery {
				t.Fatalf("merchant ledger records %v, want 1 commission and %d delivery", counts, wantDelivery)
			}
			h.assertZeroSum()
		})
	}
}

func TestEscrowRulesAndErrors(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035550011")
	buyer := h.funded("b@x.com", "08035550012", 50000)
	for _, tc := range []struct {
		fields map[string]string
		msg    string
	}{
		{map[string]string{"purpose": "x", "whoPays": "buyer"}, "amount is required"},
		{map[string]string{"amount": "999", "purpose": "x", "whoPays": "buyer"}, "amount must be an integer of at least 1000"},
		{map[string]string{"amount": "1000.50", "purpose": "x", "whoPays": "buyer"}, "amount must be an integer of at least 1000"},
		{map[string]string{"amount": "1000", "whoPays": "buyer"}, "purpose is required"},
		{map[string]string{"amount": "1000", "purpose": "x"}, "whoPays is required"},
		{map[string]string{"amount": "1000", "purpose": "x", "whoPays": "nobody"}, "whoPays must be one of buyer, seller, both"},
		{map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer", "maxDelivery": "366"}, "maxDelivery must be an integer between 1 and 365"},
		{map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer", "deliveryTimeline": "weeks"}, "deliveryTimeline must be one of minutes, hours, days"},
		{map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer", "totalQuantity": "0"}, "totalQuantity must be an integer between 1 and 10000"},
	} {
		h.createEscrow(seller, tc.fields, 0).expect(t, 400, tc.msg)
	}
	h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer"}, 6).
		expect(t, 400, "imageUrl accepts at most 5 images")
	// JSON is accepted too.
	e := h.do(req{method: "POST", path: "/v1/escrow/create", key: h.std(), cid: seller,
		body: map[string]any{"amount": 2000, "purpose": "Shoes", "whoPays": "seller"}}).expect(t, 201, "").obj()
	token, id := e["paymentToken"].(string), e["id"].(string)

	// Edit: seller only, fee recomputed, images append.
	body, ct := escrowForm(t, map[string]string{"amount": "4000"}, 1)
	h.do(req{method: "PUT", path: "/v1/escrow/edit/" + token, key: h.std(), cid: buyer, body: body,
		headers: map[string]string{"Content-Type": ct}}).expect(t, 400, "Action not allowed")
	ed := h.do(req{method: "PUT", path: "/v1/escrow/edit/" + token, key: h.std(), cid: seller, body: body,
		headers: map[string]string{"Content-Type": ct}}).expect(t, 200, "Escrow updated successfully").obj()
	if ed["amount"] != 4000.0 || ed["fee"] != 100.0 || len(ed["imageUrl"].([]any)) != 1 {
		t.Fatalf("edited %v", ed)
	}
	v := h.do(req{path: "/v1/escrow/verify/" + token, key: h.std(), cid: buyer}).expect(t, 200, "Escrow fetched successfully").obj()
	if v["isSeller"] != false || v["amount"] != 4000.0 {
		t.Fatalf("verify %v", v)
	}
	h.do(req{path: "/v1/escrow/verify/PT_NOPE", key: h.std()}).expect(t, 400, "Escrow not found")

	h.pay(seller, "own", 4000, id).expect(t, 400, "Seller cannot pay for own escrow")
	h.do(req{method: "POST", path: "/v1/payment/escrow", key: h.std(), cid: buyer, body: map[string]any{
		"amount": 4000, "reference": "card", "transactionType": "escrow", "gateway": "card", "escrowDetails": map[string]any{"escrowId": id}}}).
		expect(t, 403, "This feature is not enabled on your merchant account")
	h.pay(buyer, "unknown", 4000, "nope").expect(t, 400, "Escrow not found")
	poor := h.createCustomer(h.sa(), "p@x.com", "08035550013")
	h.pay(poor, "poor", 4000, id).expect(t, 400, "Insufficient balance")
	h.pay(buyer, "p-1", 4000, id).expect(t, 200, "")
	h.pay(buyer, "p-2", 4000, id).expect(t, 400, "Escrow is not in a valid state for checkout")
	h.do(req{method: "DELETE", path: "/v1/escrow/delete/" + token, key: h.std(), cid: seller}).expect(t, 400, "Action not allowed")
	h.do(req{method: "PUT", path: "/v1/escrow/edit/" + token, key: h.std(), cid: seller, body: map[string]any{"purpose": "y"}}).
		expect(t, 400, "Action not allowed")

	// Claim: seller only, after the window.
	h.do(req{path: "/v1/escrow/claim-funds/" + token, key: h.std(), cid: buyer}).expect(t, 400, "Action not allowed")
	h.do(req{path: "/v1/escrow/claim-funds/" + token, key: h.std(), cid: seller}).expect(t, 400, "Escrow cannot be claimed yet")

	// Delete an unpaid link.
	e2 := h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer"}, 0).expect(t, 201, "").obj()
	h.do(req{method: "DELETE", path: "/v1/escrow/delete/" + e2["paymentToken"].(string), key: h.std(), cid: buyer}).expect(t, 400, "Action not allowed")
	h.do(req{method: "DELETE", path: "/v1/escrow/delete/" + e2["paymentToken"].(string), key: h.std(), cid: seller}).
		expect(t, 200, "Escrow deleted successfully")
	h.do(req{path: "/v1/escrow/verify/" + e2["paymentToken"].(string), key: h.std()}).expect(t, 400, "Escrow not found")

	// Additional fee rules.
	e3 := h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer"}, 0).expect(t, 201, "").obj()
	t3 := e3["paymentToken"].(string)
	h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + t3, key: h.std(), body: map[string]any{"additionalFee": 10}}).expect(t, 401, "Access denied")
	h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + t3, key: h.sa(), cid: seller, body: map[string]any{"additionalFee": 10}}).
		expect(t, 400, "customer-id is not allowed in request header")
	h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + t3, key: h.sa(), body: map[string]any{"additionalFee": -1}}).
		expect(t, 400, "additionalFee cannot be negative")
	h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/PT_NOPE", key: h.sa(), body: map[string]any{"additionalFee": 1}}).
		expect(t, 400, "Escrow not found")
	other := h.newMerchant(true)
	h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + t3, key: key(other, domain.Test, merchant.SuperAdmin), body: map[string]any{"additionalFee": 1}}).
		expect(t, 400, "Escrow does not belong to this merchant")
	h.do(req{path: "/v1/escrow/verify/" + t3, key: key(other, domain.Test, merchant.Standard)}).
		expect(t, 400, "Escrow does not belong to this merchant")
	h.do(req{path: "/v1/escrow/verify/" + t3, key: key(h.m, domain.Live, merchant.Standard), host: liveHost}).
		expect(t, 400, "Escrow not found")
	af := h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + t3, key: h.sa(), body: map[string]any{"additionalFee": 200, "additionalFeeRefundable": false}}).
		expect(t, 200, "").obj()
	if af["additionalFee"] != 200.0 || af["additionalFeeRefundable"] != false {
		t.Fatalf("additional fee %v", af)
	}
	af = h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + t3, key: h.sa(), body: map[string]any{"additionalFee": 0}}).expect(t, 200, "").obj()
	if af["additionalFee"] != 0.0 || af["additionalFeeRefundable"] != false {
		t.Fatalf("additional fee reset %v", af)
	}

	// A non-business merchant cannot sell as itself.
	nb := h.newMerchant(false)
	h.do(req{method: "POST", path: "/v1/escrow/create", key: key(nb, domain.Test, merchant.Standard),
		body: map[string]any{"amount": 2000, "purpose": "x", "whoPays": "buyer"}}).expect(t, 401, "Merchant cannot create escrow for itself via API")
	// A business merchant can.
	own := h.do(req{method: "POST", path: "/v1/escrow/create", key: h.std(), body: map[string]any{"amount": 2000, "purpose": "x", "whoPays": "buyer"}}).
		expect(t, 201, "").obj()
	if own["isMerchant"] != true || own["sellerId"] != nil {
		t.Fatalf("merchant's own escrow %v", own)
	}

	// Listings.
	sales := h.do(req{path: "/v1/escrow/transactions?type=sales", key: h.std(), cid: seller}).expect(t, 200, "Transaction fetched successfully").obj()
	if n := sales["pagination"].(map[string]any)["count"]; n != 2.0 { // e (paid) and e3; e2 deleted
		t.Fatalf("sales count %v", n)
	}
	buys := h.do(req{path: "/v1/escrow/transactions?type=buy&status=ongoing", key: h.std(), cid: buyer}).expect(t, 200, "").obj()
	if n := buys["pagination"].(map[string]any)["count"]; n != 1.0 {
		t.Fatalf("buy count %v", n)
	}
	h.do(req{path: "/v1/escrow/transactions", key: h.std(), cid: buyer}).expect(t, 400, "type must be sales or buy")
	feeds := h.do(req{path: "/v1/escrow/feeds?customerId=" + seller, key: h.std()}).expect(t, 200, "Escrows fetched successfully").obj()
	if n := feeds["pagination"].(map[string]any)["count"]; n != 2.0 {
		t.Fatalf("feeds count %v", n)
	}
	for q, want := range map[string]float64{"&fromDate=2000-01-01&toDate=2999-12-31": 2, "&fromDate=2999-01-01": 0, "&toDate=2000-01-01": 0} {
		got := h.do(req{path: "/v1/escrow/feeds?customerId=" + seller + q, key: h.std()}).expect(t, 200, "").obj()
		if n := got["pagination"].(map[string]any)["count"]; n != want {
			t.Fatalf("feeds %s: count %v, want %v", q, n, want)
		}
	}
	h.do(req{path: "/v1/escrow/feeds?toDate=tomorrow", key: h.std()}).
		expect(t, 400, "toDate must be a date (YYYY-MM-DD) or an RFC 3339 time")
	h.do(req{path: "/v1/escrow/feeds", key: h.std(), cid: seller}).expect(t, 400, "customer-id is not allowed in request header")
}

func TestEscrowClaimAfterWindow(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035550021")
	buyer := h.funded("b@x.com", "08035550022", 5000)
	e := h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer",
		"maxDelivery": "1", "deliveryTimeline": "minutes"}, 0).expect(t, 201, "").obj()
	h.pay(buyer, "p", 1025, e["id"]).expect(t, 200, "")
	h.do(req{path: "/v1/escrow/claim-funds/" + e["paymentToken"].(string), key: h.std(), cid: seller}).expect(t, 400, "Escrow cannot be claimed yet")
	h.passClaimWindow()
	c := h.do(req{path: "/v1/escrow/claim-funds/" + e["paymentToken"].(string), key: h.std(), cid: seller}).expect(t, 200, "Funds claimed successfully").obj()
	if c["status"] != "CLAIMED" || c["state"] != "CLOSED" {
		t.Fatalf("claimed %v", c)
	}
	h.expectWallet(seller, 1000, 0)
	h.expectWallet(buyer, 3975, 0)
	h.expectMerchant(12.5, 0)
	h.assertZeroSum()
}

func TestEscrowConcurrency(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035550031")
	buyer := h.funded("b@x.com", "08035550032", 5000)
	e := h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer"}, 0).expect(t, 201, "").obj()
	id := e["id"].(string)
	h.pay(buyer, "p", 1025, id).expect(t, 200, "")
	// 20 parallel confirms release the money once.
	won := parallel(20, func(int) bool {
		r := h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + id, key: h.std(), cid: buyer})
		if r.Status != 200 && r.Message != "Action not allowed" {
			t.Errorf("confirm: %d %s", r.Status, r.Raw)
		}
		return r.Status == 200
	})
	if won != 1 {
		t.Fatalf("%d confirms succeeded", won)
	}
	h.expectWallet(seller, 1000, 0)
	h.expectMerchant(12.5, 0)

	// 20 buyers race for the last unit of a 2-unit link after one sold.
	link := h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer", "totalQuantity": "2"}, 0).
		expect(t, 201, "").obj()
	lid := link["id"].(string)
	first := h.pay(buyer, "first", 1025, lid).expect(t, 200, "").obj()
	clone := first["escrows"].([]any)[0].(map[string]any)
	if clone["id"] == lid || clone["parentId"] != lid || clone["totalQuantity"] != 1.0 {
		t.Fatalf("clone %v", clone)
	}
	// Repeating the purchase returns its outcome (the clone it funded) and
	// neither mints another clone nor takes another unit or more money.
	before, held := h.wallet(buyer)
	again := h.pay(buyer, "first", 1025, lid).expect(t, 200, "Payment successful").obj()
	if got := again["escrows"].([]any)[0].(map[string]any)["id"]; got != clone["id"] || again["id"] != first["id"] {
		t.Fatalf("repeated purchase %v, want clone %v", again, clone["id"])
	}
	h.expectWallet(buyer, before, held)
	var buyers []string
	for i := 0; i < 20; i++ {
		buyers = append(buyers, h.funded(fmt.Sprintf("r%d@x.com", i), fmt.Sprintf("0803666%04d", i), 2000))
	}
	var mu sync.Mutex
	var winner string
	won = parallel(20, func(i int) bool {
		r := h.pay(buyers[i], fmt.Sprintf("race-%d", i), 1025, lid)
		if r.Status != 200 && r.Message != "Escrow is sold out" {
			t.Errorf("pay: %d %s", r.Status, r.Raw)
		}
		if r.Status == 200 {
			mu.Lock()
			winner = buyers[i]
			mu.Unlock()
		}
		return r.Status == 200
	})
	if won != 1 {
		t.Fatalf("%d buyers got the last unit", won)
	}
	for _, b := range buyers {
		if b == winner {
			h.expectWallet(b, 975, 1025)
		} else {
			h.expectWallet(b, 2000, 0)
		}
	}
	h.pay(buyer, "late", 1025, lid).expect(t, 400, "Escrow is sold out")
	h.assertZeroSum()
}

func TestEscrowPaymentBatchAndIntent(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035550041")
	buyer := h.funded("b@x.com", "08035550042", 10000)
	var ids []string
	for i := 0; i < 3; i++ {
		e := h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "x", "whoPays": "both"}, 0).expect(t, 201, "").obj()
		ids = append(ids, e["id"].(string))
	}
	// All or none: one escrow paid elsewhere fails the whole batch.
	h.pay(buyer, "one", 1012.5, ids[2]).expect(t, 200, "")
	h.pay(buyer, "batch-bad", 3037.5, ids).expect(t, 400, "Escrow is not in a valid state for checkout")
	h.expectWallet(buyer, 8987.5, 1012.5)
	r := h.pay(buyer, "batch", 2025, ids[:2]).expect(t, 200, "").obj()
	if len(r["escrows"].([]any)) != 2 {
		t.Fatalf("batch %v", r)
	}
	h.expectWallet(buyer, 6962.5, 3037.5)

	// Two-step: create-intent escrow + verify.
	e := h.createEscrow(seller, map[string]string{"amount": "2000", "purpose": "x", "whoPays": "buyer"}, 0).expect(t, 201, "").obj()
	h.intent(buyer, map[string]any{"reference": "int-1", "amount": 2000, "transactionType": "escrow",
		"escrowDetails": map[string]any{"escrowId": e["id"]}}).expect(t, 400, "Amount mismatch")
	rec := h.intent(buyer, map[string]any{"reference": "int-2", "amount": 2050, "transactionType": "escrow",
		"escrowDetails": map[string]any{"escrowId": []any{e["id"]}}}).expect(t, 201, "").obj()
	if rec["status"] != "pending" || rec["fee"] != 50.0 {
		t.Fatalf("escrow intent %v", rec)
	}
	h.expectWallet(buyer, 6962.5, 3037.5)
	h.verify(buyer, "int-2").expect(t, 200, "")
	h.expectWallet(buyer, 4912.5, 5087.5)
	v := h.do(req{path: "/v1/escrow/verify/" + e["paymentToken"].(string), key: h.std()}).expect(t, 200, "").obj()
	if v["status"] != "ONGOING" {
		t.Fatalf("after verify %v", v)
	}
	h.verify(buyer, "int-2").expect(t, 200, "")
	h.expectWallet(buyer, 4912.5, 5087.5)
	// Staging the same request again answers with the settled intent, not
	// with a refusal from the escrow it already paid.
	repeat := h.intent(buyer, map[string]any{"reference": "int-2", "amount": 2050, "transactionType": "escrow",
		"escrowDetails": map[string]any{"escrowId": []any{e["id"]}}}).expect(t, 201, "").obj()
	if repeat["id"] != rec["id"] || repeat["status"] != "success" {
		t.Fatalf("repeated escrow intent %v", repeat)
	}
	h.intent(buyer, map[string]any{"reference": "int-2", "amount": 2050.5, "transactionType": "escrow",
		"escrowDetails": map[string]any{"escrowId": e["id"]}}).expect(t, 409, "Reference already used for a different transaction")
	h.expectWallet(buyer, 4912.5, 5087.5)
	h.assertZeroSum()
}
