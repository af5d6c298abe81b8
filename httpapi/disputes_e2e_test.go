package httpapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/internal/files"
)

// minimalPDF is the smallest file http.DetectContentType calls a PDF.
var minimalPDF = []byte("%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n")

// submitDispute sends a party's dispute entry as multipart, with an
// optional evidence file.
func (h *harness) submitDispute(token, cid, message string, files ...uploadPart) resp {
	h.t.Helper()
	body, ct := uploadForm(h.t, map[string]string{"message": message}, files...)
	return h.do(req{method: "POST", path: "/v1/escrow/submit-dispute/" + token, key: h.std(), cid: cid, body: body,
		headers: map[string]string{"Content-Type": ct}})
}

// resolveDispute is the merchant's ruling, as JSON.
func (h *harness) resolveDispute(id string, body map[string]any) resp {
	h.t.Helper()
	return h.do(req{method: "POST", path: "/v1/escrow/dispute/resolve/" + id, key: h.std(), body: body})
}

// disputedEscrow creates an escrow of 10,000 sold by seller with whoPays
// and an additional fee (refundable unless told otherwise), has buyer pay
// it and open a dispute; it returns the escrow's id and token.
func (h *harness) disputedEscrow(seller, buyer, whoPays string, additional float64, refundable *bool, due float64) (string, string) {
	h.t.Helper()
	e := h.createEscrow(seller, map[string]string{"amount": "10000", "purpose": "Phone", "whoPays": whoPays,
		"maxDelivery": "1", "deliveryTimeline": "minutes"}, 0).expect(h.t, 201, "").obj()
	id, token := e["id"].(string), e["paymentToken"].(string)
	if additional > 0 || refundable != nil {
		body := map[string]any{"additionalFee": additional}
		if refundable != nil {
			body["additionalFeeRefundable"] = *refundable
		}
		h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + token, key: h.sa(), body: body}).expect(h.t, 200, "")
	}
	h.pay(buyer, "pay-"+id, due, id).expect(h.t, 200, "Payment successful")
	d := h.submitDispute(token, buyer, "The phone never arrived").expect(h.t, 200, "Escrow dispute submitted successfully").obj()
	entries := d["dispute"].([]any)
	if d["status"] != "DISPUTED" || d["state"] != "OPENED" || len(entries) != 1 {
		h.t.Fatalf("disputed escrow %v", d)
	}
	if e := entries[0].(map[string]any); e["type"] != "buyer" || e["userId"] != buyer || e["message"] != "The phone never arrived" ||
		e["name"] != "Ada Obi" || e["proofUrl"] != "" || e["profile"] != nil {
		h.t.Fatalf("buyer's entry %v", e)
	}
	return id, token
}

// historyTotals sums a customer's transaction records by type, exactly.
func (h *harness) historyTotals(cid string) map[string]money.Amount {
	h.t.Helper()
	out := map[string]money.Amount{}
	for id, r := range h.apiRecords(cid) {
		if r["customerId"] != cid {
			continue
		}
		a, err := money.Parse(fmt.Sprint(r["amount"]))
		if err != nil {
			h.t.Fatalf("record %s amount %v", id, r["amount"])
		}
		out[fmt.Sprint(r["transactionType"])] += a
	}
	return out
}

// TestDisputeOutcomeBalances resolves disputes every way the decisions
// allow and checks the exact balances of buyer, seller, merchant and
// platform, the records that explain them, and the zero sum.
func TestDisputeOutcomeBalances(t *testing.T) {
	no := false
	for _, tc := range []struct {
		name         string
		whoPays      string
		additional   float64
		escrowRefund *bool // the escrow's additionalFeeRefundable (nil: default true)
		due          float64
		resolve      map[string]any
		multipart    bool
		buyerMain    float64 // after the resolution (the buyer started with 20,000)
		sellerMain   float64
		merchantMain float64
		delivery     int // delivery records
		refunded     bool
	}{
		// amount 10,000: fee 250, commission 125, platform 125.
		{name: "completed", whoPays: "buyer", due: 10250, resolve: map[string]any{"status": "COMPLETED"},
			buyerMain: 9750, sellerMain: 10000, merchantMain: 125},
		{name: "completed with an additional fee", whoPays: "both", additional: 300, due: 10425,
			resolve: map[string]any{"status": "completed"}, buyerMain: 9575, sellerMain: 9875, merchantMain: 425, delivery: 1},
		{name: "refunded, additional fee refundable", whoPays: "both", additional: 300, due: 10425,
			resolve: map[string]any{"status": "REFUNDED"}, buyerMain: 9575 + 9875 + 300, merchantMain: 125, refunded: true},
		{name: "refunded, additional fee kept by the escrow's setting", whoPays: "seller", additional: 500, escrowRefund: &no,
			due: 10500, resolve: map[string]any{"status": "REFUNDED"}, buyerMain: 9500 + 9750, merchantMain: 625, delivery: 1, refunded: true},
		{name: "split, the request keeps the additional fee", whoPays: "buyer", additional: 500, due: 10750,
			resolve:   map[string]any{"status": "SPLIT", "sellerAmount": 6000, "buyerAmount": 4000, "additionalFeeRefundable": false},
			buyerMain: 9250 + 4000, sellerMain: 6000, merchantMain: 625, delivery: 1},
		{name: "split to the kobo by multipart", whoPays: "both", additional: 300, due: 10425, multipart: true,
			resolve: map[string]any{"status": "SPLIT", "sellerAmount": "5000.25", "buyerAmount": "4874.75",
				"resolution": "Half each, the screen was cracked"},
			buyerMain: 9575 + 4874.75 + 300, sellerMain: 5000.25, merchantMain: 125},
		{name: "split all to the buyer", whoPays: "seller", due: 10000,
			resolve: map[string]any{"status": "SPLIT", "sellerAmount": 0, "buyerAmount": 9750}, buyerMain: 10000 + 9750, merchantMain: 125},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			seller := h.createCustomer(h.sa(), "s@x.com", "08035557001")
			buyer := h.funded("b@x.com", "08035557002", 20000)
			id, token := h.disputedEscrow(seller, buyer, tc.whoPays, tc.additional, tc.escrowRefund, tc.due)
			// While disputed nothing but the merchant's ruling settles it.
			h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + id, key: h.std(), cid: buyer}).expect(t, 400, "Escrow is under dispute")
			h.passClaimWindow()
			h.do(req{path: "/v1/escrow/claim-funds/" + token, key: h.std(), cid: seller}).expect(t, 400, "Escrow is under dispute")
			h.submitDispute(token, seller, "It was delivered", uploadPart{"file", "proof.pdf", "application/pdf", minimalPDF}).
				expect(t, 200, "Escrow dispute submitted successfully")
			h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + id, key: h.std(), cid: buyer}).expect(t, 400, "Escrow is under dispute")
			held := h.amount(tc.due - tc.additional)
			h.expectWallet(buyer, 20000-tc.due, held)
			h.expectMerchant(0, tc.additional)

			var r resp
			if tc.multipart {
				fields := map[string]string{}
				for k, v := range tc.resolve {
					fields[k] = fmt.Sprint(v)
				}
				body, ct := uploadForm(t, fields, uploadPart{"file", "ruling.png", "image/png", uploadPNG(t)})
				r = h.do(req{method: "POST", path: "/v1/escrow/dispute/resolve/" + id, key: h.std(), body: body,
					headers: map[string]string{"Content-Type": ct}})
			} else {
				r = h.resolveDispute(id, tc.resolve)
			}
			got := r.expect(t, 200, "Dispute resolved successfully").obj()
			status := strings.ToUpper(fmt.Sprint(tc.resolve["status"]))
			if got["status"] != status || got["state"] != "CLOSED" || got["completedAt"] == nil ||
				fmt.Sprint(got["logs"]) != "[PENDING ONGOING DISPUTED INVESTIGATING "+status+"]" {
				t.Fatalf("resolved escrow %v", got)
			}
			entries := got["dispute"].([]any)
			if len(entries) < 2 || entries[1].(map[string]any)["type"] != "seller" ||
				!strings.HasSuffix(fmt.Sprint(entries[1].(map[string]any)["proofUrl"]), ".pdf") {
				t.Fatalf("dispute entries %v", entries)
			}
			if tc.multipart {
				admin := entries[2].(map[string]any)
				if len(entries) != 3 || admin["type"] != "admin" || admin["message"] != tc.resolve["resolution"] ||
					admin["userId"] != h.m.MerchantID || !strings.HasSuffix(fmt.Sprint(admin["proofUrl"]), ".png") {
					t.Fatalf("admin entry %v", entries)
				}
			} else if len(entries) != 2 {
				t.Fatalf("an admin entry without text or file: %v", entries)
			}
			if split, ok := got["split"].(map[string]any); status == "SPLIT" {
				pool := h.amount(10000) - h.amount(250-(tc.due-tc.additional-10000))
				if !ok || h.amount(split["pool"]) != pool || h.amount(split["sellerAmount"]) != h.amount(tc.sellerMain) ||
					split["resolvedAt"] == nil {
					t.Fatalf("split %v, pool %s", got["split"], pool)
				}
			} else if ok {
				t.Fatalf("split on %s: %v", status, split)
			}
			if (got["refundedBy"] == h.m.MerchantID) != tc.refunded {
				t.Fatalf("refundedBy %v", got["refundedBy"])
			}
			if v, ok := tc.resolve["additionalFeeRefundable"]; ok && got["additionalFeeRefundable"] != v {
				t.Fatalf("additionalFeeRefundable not saved: %v", got["additionalFeeRefundable"])
			}
			// A read shows what the ruling answered.
			if v := h.viewEscrow(token, ""); !reflect.DeepEqual(v, got) {
				t.Fatalf("read after resolve\n%s\n%s", jsonOf(v), jsonOf(got))
			}

			h.expectWallet(buyer, tc.buyerMain, 0)
			h.expectWallet(seller, tc.sellerMain, 0)
			h.expectMerchant(tc.merchantMain, 0)
			h.expectPlatform(125)
			counts, _ := h.merchantLedger()
			if counts["commission"] != 1 || counts["delivery"] != tc.delivery {
				t.Fatalf("merchant ledger %v", counts)
			}
			// Each party's history explains its balance.
			if got := h.historyTotals(seller)["escrow_release"]; got != h.amount(tc.sellerMain) {
				t.Fatalf("seller's release records %s, balance %v", got, tc.sellerMain)
			}
			if got := h.historyTotals(buyer)["escrow_refund"]; got != h.amount(tc.buyerMain-(20000-tc.due)) {
				t.Fatalf("buyer's refund records %s", got)
			}
			// Settled once: a second ruling, a confirm and a new dispute all refuse.
			h.resolveDispute(id, map[string]any{"status": "REFUNDED"}).expect(t, 400, "Escrow is not under dispute")
			h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + id, key: h.std(), cid: buyer}).expect(t, 400, "Action not allowed")
			h.submitDispute(token, buyer, "again").expect(t, 400, "Action not allowed")
			h.expectWallet(buyer, tc.buyerMain, 0)
			h.assertZeroSum()
			h.eventsDecodeAsEncodingJSONDoes()
		})
	}
}

// TestDisputeRulesAndMessages: every refusal of the dispute routes.
func TestDisputeRulesAndMessages(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035557101")
	buyer := h.funded("b@x.com", "08035557102", 50000)
	stranger := h.createCustomer(h.sa(), "x@x.com", "08035557103")
	e := h.createEscrow(seller, map[string]string{"amount": "10000", "purpose": "Phone", "whoPays": "buyer"}, 0).expect(t, 201, "").obj()
	id, token := e["id"].(string), e["paymentToken"].(string)

	// Unpaid: the parties may not dispute; anyone else is refused first.
	h.submitDispute(token, seller, "x").expect(t, 400, "Action not allowed")
	h.submitDispute(token, buyer, "x").expect(t, 401, "Access denied")
	h.submitDispute("PT_NOSUCHTOKEN0000000", buyer, "x").expect(t, 400, "Escrow not found")
	h.resolveDispute(id, map[string]any{"status": "COMPLETED"}).expect(t, 400, "Escrow is not under dispute")
	h.pay(buyer, "p1", 10250, id).expect(t, 200, "")

	// Header rules.
	h.do(req{method: "POST", path: "/v1/escrow/submit-dispute/" + token, key: h.std(), body: map[string]any{"message": "x"}}).
		expect(t, 400, "customer-id header is required")
	h.do(req{method: "POST", path: "/v1/escrow/dispute/resolve/" + id, key: h.std(), cid: buyer, body: map[string]any{"status": "COMPLETED"}}).
		expect(t, 400, "customer-id is not allowed in request header")
	// Body rules.
	h.submitDispute(token, buyer, "  ").expect(t, 400, "message is required")
	h.do(req{method: "POST", path: "/v1/escrow/submit-dispute/" + token, key: h.std(), cid: buyer, body: map[string]any{}}).
		expect(t, 400, "message is required")
	h.submitDispute(token, buyer, "x", uploadPart{"file", "a.pdf", "application/pdf", []byte("plain text, not a PDF")}).
		expect(t, 400, "file must be a PNG, JPEG, WebP or GIF image or a PDF")
	big := append(append([]byte{}, minimalPDF...), make([]byte, 5<<20)...)
	h.submitDispute(token, buyer, "x", uploadPart{"file", "big.pdf", "application/pdf", big}).expect(t, 413, "file must be at most 5 MB")
	h.submitDispute(token, buyer, "x", uploadPart{"file", "a.pdf", "application/pdf", minimalPDF},
		uploadPart{"file", "b.pdf", "application/pdf", minimalPDF}).expect(t, 400, "file accepts one file")
	if files := h.storedFiles(""); len(files) != 0 {
		t.Fatalf("refused uploads left files: %v", files)
	}

	// The seller may not open; strangers may not write.
	h.submitDispute(token, seller, "x").expect(t, 400, "Only the buyer can open a dispute")
	h.submitDispute(token, stranger, "x").expect(t, 401, "Access denied")
	h.resolveDispute(id, map[string]any{"status": "COMPLETED"}).expect(t, 400, "Escrow is not under dispute")
	d := h.submitDispute(token, buyer, "Broken on arrival", uploadPart{"file", "photo.png", "image/png", uploadPNG(t)}).
		expect(t, 200, "Escrow dispute submitted successfully").obj()
	proof := d["dispute"].([]any)[0].(map[string]any)["proofUrl"].(string)
	res, err := http.Get(proof)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "image/png" || len(b) == 0 {
		t.Fatalf("evidence served back: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	h.submitDispute(token, buyer, "x").expect(t, 400, "Buyer already submitted Dispute")
	h.submitDispute(token, stranger, "x").expect(t, 401, "Access denied")
	h.submitDispute(token, seller, "Delivered", uploadPart{"file", "p.pdf", "application/pdf", minimalPDF}).
		expect(t, 200, "Escrow dispute submitted successfully")
	sellerEntry := h.viewEscrow(token, seller)["dispute"].([]any)[1].(map[string]any)
	res, err = http.Get(sellerEntry["proofUrl"].(string))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/pdf" {
		t.Fatalf("PDF evidence served back: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	h.submitDispute(token, seller, "x").expect(t, 400, "Seller already submitted Dispute")
	h.submitDispute(token, buyer, "x").expect(t, 400, "Buyer already submitted Dispute")

	// Resolution rules: nothing moves on a refusal.
	for _, tc := range []struct {
		body map[string]any
		msg  string
	}{
		{map[string]any{}, "status is required"},
		{map[string]any{"status": "CLAIMED"}, "status must be one of COMPLETED, REFUNDED, SPLIT"},
		{map[string]any{"status": "SPLIT", "sellerAmount": 5000, "buyerAmount": 4000},
			"sellerAmount and buyerAmount must add up to the held amount of 10000"},
		{map[string]any{"status": "SPLIT", "sellerAmount": 5000.001, "buyerAmount": 4999.999}, "sellerAmount must have at most 2 decimal places"},
		{map[string]any{"status": "SPLIT", "sellerAmount": 10000}, "sellerAmount and buyerAmount are required with SPLIT"},
		{map[string]any{"status": "COMPLETED", "sellerAmount": 10000, "buyerAmount": 0}, "sellerAmount and buyerAmount are only allowed with SPLIT"},
		{map[string]any{"status": "REFUNDED", "additionalFeeRefundable": "maybe"}, "additionalFeeRefundable must be true or false"},
		{map[string]any{"status": "SPLIT", "sellerAmount": "abc", "buyerAmount": 1}, "sellerAmount must be a number"},
	} {
		h.resolveDispute(id, tc.body).expect(t, 400, tc.msg)
	}
	h.resolveDispute("no-such-escrow", map[string]any{"status": "COMPLETED"}).expect(t, 400, "Escrow not found")
	h.expectWallet(buyer, 50000-10250, 10250)
	h.expectWallet(seller, 0, 0)

	// Another merchant cannot rule on this escrow, nor see it.
	other := h.newMerchant(false)
	h.do(req{method: "POST", path: "/v1/escrow/dispute/resolve/" + id, key: key(other, "test", "standard"),
		body: map[string]any{"status": "REFUNDED"}}).expect(t, 400, "Escrow does not belong to this merchant")
	h.resolveDispute(id, map[string]any{"status": "SPLIT", "sellerAmount": 9999.99, "buyerAmount": 0.01}).
		expect(t, 200, "Dispute resolved successfully")
	h.expectWallet(seller, 9999.99, 0)
	h.expectWallet(buyer, 50000-10250+0.01, 0)
	h.assertZeroSum()
}

// TestDisputeListings: the customer's disputes, one escrow's dispute, and
// the merchant's listing with its filters and order.
func TestDisputeListings(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035557201")
	buyer := h.funded("b@x.com", "08035557202", 50000)
	other := h.funded("o@x.com", "08035557203", 50000)
	stranger := h.createCustomer(h.sa(), "x@x.com", "08035557204")
	id1, tok1 := h.disputedEscrow(seller, buyer, "buyer", 0, nil, 10250)
	id2, tok2 := h.disputedEscrow(seller, other, "buyer", 0, nil, 10250)
	id3, tok3 := h.disputedEscrow(seller, buyer, "buyer", 0, nil, 10250)
	// An escrow without a dispute never appears.
	plain := h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer"}, 0).expect(t, 201, "").obj()
	h.pay(buyer, "plain", 1025, plain["id"]).expect(t, 200, "")
	h.resolveDispute(id2, map[string]any{"status": "REFUNDED"}).expect(t, 200, "")

	ids := func(rows []map[string]any) string {
		var out []string
		for _, r := range rows {
			out = append(out, r["id"].(string))
		}
		return strings.Join(out, ",")
	}
	rows, pg := h.escrowPage("/v1/escrow/all-dispute", "", "Disputes fetched successfully")
	if ids(rows) != strings.Join([]string{id3, id2, id1}, ",") || pg["count"] != 3.0 {
		t.Fatalf("all disputes (newest first): %s %v", ids(rows), pg)
	}
	if rows[0]["dispute"] == nil || rows[1]["status"] != "REFUNDED" {
		t.Fatalf("rows carry the escrow with its dispute: %v", rows[1])
	}
	for q, want := range map[string]string{
		"?status=refunded":         id2,
		"?status=DISPUTED":         id3 + "," + id1,
		"?paymentToken=" + tok1:    id1,
		"?paymentId=" + "no-such":  "",
		"?limit=1&page=2":          id2,
		"?fromDate=2000-01-01":     id3 + "," + id2 + "," + id1,
		"?toDate=2000-01-01":       "",
		"?paymentToken=" + tok2:    id2,
		"?status=DISPUTED&limit=1": id3,
		"?paymentToken=" + tok3:    id3,
		"?paymentId=" + fmt.Sprint(h.viewEscrow(tok3, "")["paymentId"]): id3,
	} {
		if rows, _ := h.escrowPage("/v1/escrow/all-dispute"+q, "", ""); ids(rows) != want {
			t.Errorf("all-dispute%s: %s, want %s", q, ids(rows), want)
		}
	}
	h.do(req{path: "/v1/escrow/all-dispute", key: h.std(), cid: buyer}).expect(t, 400, "customer-id is not allowed in request header")

	// A customer sees the disputes of escrows it buys or sells.
	for cid, want := range map[string]string{buyer: id3 + "," + id1, other: id2, seller: id3 + "," + id2 + "," + id1, stranger: ""} {
		if rows, _ := h.escrowPage("/v1/escrow/dispute/get", cid, "Disputes fetched successfully"); ids(rows) != want {
			t.Errorf("dispute/get as %s: %s, want %s", cid, ids(rows), want)
		}
	}
	if rows, _ := h.escrowPage("/v1/escrow/dispute/get?paymentToken="+tok1, buyer, ""); ids(rows) != id1 {
		t.Errorf("dispute/get by token: %s", ids(rows))
	}
	h.do(req{path: "/v1/escrow/dispute/get", key: h.std()}).expect(t, 400, "customer-id header is required")

	// One escrow's dispute, for its buyer or seller only.
	one := h.do(req{path: "/v1/escrow/dispute/get/" + id1, key: h.std(), cid: seller}).expect(t, 200, "Dispute fetched successfully").obj()
	if one["id"] != id1 || len(one["dispute"].([]any)) != 1 || one["isSeller"] != true {
		t.Fatalf("dispute of one escrow %v", one)
	}
	h.do(req{path: "/v1/escrow/dispute/get/" + id1, key: h.std(), cid: buyer}).expect(t, 200, "")
	h.do(req{path: "/v1/escrow/dispute/get/" + id1, key: h.std(), cid: other}).expect(t, 401, "Access denied")
	h.do(req{path: "/v1/escrow/dispute/get/nope", key: h.std(), cid: buyer}).expect(t, 400, "Escrow not found")
}

// storedFiles lists the names of the files the store holds whose owner is
// owner (every file for "").
func (h *harness) storedFiles(owner string) []string {
	h.t.Helper()
	var names []string
	err := h.api.Files().Backend().List(context.Background(), func(i files.Info) error {
		if owner == "" || strings.HasPrefix(i.Name, owner+"/") {
			names = append(names, i.Name)
		}
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return names
}

// TestDisputeRaces: a resolution racing a confirm and a claim settles the
// escrow once, and of rulings racing each other one wins.
func TestDisputeRaces(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035557301")
	buyer := h.funded("b@x.com", "08035557302", 100000)
	var sellerGot, buyerBack money.Amount
	start := time.Now().UTC()
	for round := 0; round < 6; round++ {
		// Pay at one time, race a minute and more later: the claim window
		// (one minute) has passed.
		paidAt := start.Add(time.Duration(round) * 5 * time.Minute)
		h.svc.Engine.Now = func() time.Time { return paidAt }
		e := h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer",
			"maxDelivery": "1", "deliveryTimeline": "minutes"}, 0).expect(t, 201, "").obj()
		id, token := e["id"].(string), e["paymentToken"].(string)
		h.pay(buyer, fmt.Sprintf("race-%d", round), 1025, id).expect(t, 200, "")
		h.svc.Engine.Now = func() time.Time { return paidAt.Add(2 * time.Minute) }
		// The buyer disputes and the merchant rules at once, while a
		// confirm and a claim arrive a little later each round, so that
		// either side wins some rounds.
		results := make([]resp, 4)
		delay := time.Duration(round) * 6 * time.Millisecond
		parallel(3, func(i int) bool {
			switch i {
			case 0:
				results[0] = h.submitDispute(token, buyer, "wait")
				results[3] = h.resolveDispute(id, map[string]any{"status": "REFUNDED"})
			case 1:
				time.Sleep(delay)
				results[1] = h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + id, key: h.std(), cid: buyer})
			case 2:
				time.Sleep(delay)
				results[2] = h.do(req{path: "/v1/escrow/claim-funds/" + token, key: h.std(), cid: seller})
			}
			return true
		})
		settled := 0
		for i, r := range results[1:] {
			switch {
			case r.Status == 200:
				settled++
			case r.Status == 400 && (r.Message == "Escrow is under dispute" || r.Message == "Action not allowed" ||
				r.Message == "Escrow is not under dispute"):
			default:
				t.Fatalf("round %d, request %d: %d %s", round, i+1, r.Status, r.Raw)
			}
		}
		v := h.viewEscrow(token, "")
		t.Logf("round %d: %v", round, v["logs"])
		switch {
		case v["status"] == "DISPUTED" && settled == 0:
			// The dispute came after the ruling tried; rule now.
			h.resolveDispute(id, map[string]any{"status": "REFUNDED"}).expect(t, 200, "")
			buyerBack += h.amount(1000)
		case settled != 1:
			t.Fatalf("round %d: %d settlements: %v", round, settled, v["logs"])
		case v["status"] == "REFUNDED":
			buyerBack += h.amount(1000)
		default:
			sellerGot += h.amount(1000)
		}
	}
	h.expectWallet(seller, sellerGot, 0)
	h.expectWallet(buyer, h.amount(100000)-6*h.amount(1025)+buyerBack, 0)
	counts, _ := h.merchantLedger()
	if counts["commission"] != 6 {
		t.Fatalf("commissions %v", counts)
	}

	// Ten rulings of one dispute: one wins.
	e := h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer"}, 0).expect(t, 201, "").obj()
	id, token := e["id"].(string), e["paymentToken"].(string)
	h.pay(buyer, "rulings", 1025, id).expect(t, 200, "")
	h.submitDispute(token, buyer, "x").expect(t, 200, "")
	before, _ := h.wallet(buyer)
	won := parallel(10, func(i int) bool {
		body := map[string]any{"status": "COMPLETED"}
		if i%2 == 1 {
			body = map[string]any{"status": "SPLIT", "sellerAmount": 500, "buyerAmount": 500}
		}
		r := h.resolveDispute(id, body)
		if r.Status != 200 && r.Message != "Escrow is not under dispute" {
			t.Errorf("ruling: %d %s", r.Status, r.Raw)
		}
		return r.Status == 200
	})
	if won != 1 {
		t.Fatalf("%d rulings won", won)
	}
	after, _ := h.wallet(buyer)
	if v := h.viewEscrow(token, ""); (v["status"] == "SPLIT") != (after-before == h.amount(500)) {
		t.Fatalf("status %v, buyer got back %s", v["status"], after-before)
	}
	counts, _ = h.merchantLedger()
	if counts["commission"] != 7 {
		t.Fatalf("commissions %v", counts)
	}
	h.assertZeroSum()
}

// TestWebhooksDispute: a dispute announces escrow.disputed,
// escrow.investigating and its outcome (escrow.split with the split
// object), each as the API shows the escrow then, and the commission and
// delivery records the ruling settles, each once.
func TestWebhooksDispute(t *testing.T) {
	h := newWebhookHarness(t)
	rc, seller, buyer, topUpRef, answered := hookedSellerAndBuyer(t, h, "08035557401", "08035557402")
	e := h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer"}, 0).expect(t, 201, "").obj()
	id, token := e["id"].(string), e["paymentToken"].(string)
	h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + token, key: h.sa(), body: map[string]any{"additionalFee": 200}}).expect(t, 200, "")
	answered["p-1"] = withoutEscrows(h.pay(buyer, "p-1", 1225, id).expect(t, 200, "").obj())
	h.submitDispute(token, buyer, "late").expect(t, 200, "")
	disputed := h.escrowByToken(token)
	h.submitDispute(token, seller, "on its way").expect(t, 200, "")
	investigating := h.escrowByToken(token)
	h.resolveDispute(id, map[string]any{"status": "SPLIT", "sellerAmount": 600.5, "buyerAmount": 399.5, "additionalFeeRefundable": false}).
		expect(t, 200, "")
	split := h.escrowByToken(token)

	hits := h.allWebhooks(rc)
	byKey, order := escrowHits(t, hits)
	for k, want := range map[string]map[string]any{"escrow.disputed " + id: disputed, "escrow.investigating " + id: investigating,
		"escrow.split " + id: split} {
		hh, ok := byKey[k]
		if !ok {
			t.Fatalf("no %s in %v", k, order)
		}
		if !reflect.DeepEqual(hh.Data, want) {
			t.Fatalf("%s payload differs from the API's escrow:\n%s\n%s", k, jsonOf(hh.Data), jsonOf(want))
		}
	}
	if sp := byKey["escrow.split "+id].Data["split"].(map[string]any); sp["sellerAmount"] != 600.5 || sp["buyerAmount"] != 399.5 ||
		sp["pool"] != 1000.0 {
		t.Fatalf("escrow.split carries %v", sp)
	}
	if len(byKey) != 5 || !(order["escrow.ongoing "+id] < order["escrow.disputed "+id] &&
		order["escrow.disputed "+id] < order["escrow.investigating "+id] && order["escrow.investigating "+id] < order["escrow.split "+id]) {
		t.Fatalf("escrow events %v", order)
	}
	got := paymentPayloads(t, hits, h.apiRecords(seller, buyer), answered)
	want := map[string]int{
		"payment.deposit.success " + topUpRef:                  1,
		"payment.escrow.success p-1":                           1,
		"payment.commission.success ESC-" + id + "-commission": 1,
		"payment.delivery.success ESC-" + id + "-delivery":     1,
	}
	if !reflect.DeepEqual(got, want) || len(hits) != len(want)+5 {
		t.Fatalf("payment events\n got %v\nwant %v", got, want)
	}
}
