package httpapi

import (
	"fmt"
	"testing"
	"time"
)

// createMilestones creates a milestone escrow (JSON) sold by cid.
func (h *harness) createMilestones(cid string, body map[string]any) resp {
	h.t.Helper()
	return h.do(req{method: "POST", path: "/v1/escrow/milestone/create", key: h.std(), cid: cid, body: body})
}

func (h *harness) confirmMilestone(buyer, id, milestoneID string) resp {
	h.t.Helper()
	return h.do(req{method: "POST", path: "/v1/escrow/milestone/confirm/" + id + "/" + milestoneID, key: h.std(), cid: buyer})
}

// milestoneBody is a 10,000 escrow of four milestones (2,000 to the
// beneficiary, then 1,000, 3,000 and 4,000 to the seller).
func milestoneBody(beneficiary string) map[string]any {
	due := time.Now().UTC().Add(72 * time.Hour).Format(time.RFC3339)
	return map[string]any{"amount": 10000, "purpose": "Website", "description": "Four steps", "whoPays": "buyer",
		"maxDelivery": 30, "deliveryTimeline": "days", "milestones": []map[string]any{
			{"title": "Design", "description": "mockups", "amount": 2000, "dueDate": due, "customerId": beneficiary},
			{"title": "Build", "amount": 1000},
			{"title": "Test", "amount": 3000, "dueDate": time.Now().UTC().AddDate(0, 1, 0).Format("2006-01-02")},
			{"title": "Ship", "amount": 4000},
		}}
}

func milestoneIDs(t *testing.T, e map[string]any) []string {
	t.Helper()
	var out []string
	for _, m := range e["milestones"].([]any) {
		out = append(out, m.(map[string]any)["id"].(string))
	}
	return out
}

// TestMilestoneLifecycleBalances: paid in full, released milestone by
// milestone in order with exact balances after each, the last completing
// the escrow and collecting fee and commission once.
func TestMilestoneLifecycleBalances(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035558001")
	helper := h.createCustomer(h.sa(), "d@x.com", "08035558003")
	buyer := h.funded("b@x.com", "08035558002", 20000)
	e := h.createMilestones(seller, milestoneBody(helper)).expect(t, 201, "Milestone escrow created successfully").obj()
	id, token := e["id"].(string), e["paymentToken"].(string)
	ms := e["milestones"].([]any)
	if e["settlementType"] != "MILESTONE" || e["fee"] != 250.0 || e["whoPays"] != "buyer" || len(ms) != 4 || e["status"] != "PENDING" {
		t.Fatalf("created %v", e)
	}
	m0 := ms[0].(map[string]any)
	if m0["title"] != "Design" || m0["amount"] != 2000.0 || m0["customerId"] != helper || m0["status"] != "PENDING" ||
		m0["releasedAt"] != nil || m0["dueDate"] == nil || ms[1].(map[string]any)["customerId"] != nil {
		t.Fatalf("milestone %v", m0)
	}
	ids := milestoneIDs(t, e)
	h.pay(buyer, "ms-pay", 10249, id).expect(t, 400, "Amount mismatch")
	paid := h.pay(buyer, "ms-pay", 10250, id).expect(t, 200, "Payment successful").obj()
	if paid["escrows"].([]any)[0].(map[string]any)["status"] != "ONGOING" {
		t.Fatalf("paid %v", paid)
	}
	h.expectWallet(buyer, 9750, 10250)
	// The standard confirm and the claim do not apply to milestone escrows.
	h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + id, key: h.std(), cid: buyer}).expect(t, 400, "Action not allowed")
	h.confirmMilestone(buyer, id, ids[1]).expect(t, 400, "Milestones must be confirmed in order")
	h.confirmMilestone(seller, id, ids[0]).expect(t, 400, "Action not allowed")
	h.confirmMilestone(buyer, id, "no-such").expect(t, 400, "Milestone not found")

	type after struct{ buyerEscrow, seller, helper float64 }
	for i, want := range []after{{8250, 0, 2000}, {7250, 1000, 2000}, {4250, 4000, 2000}, {0, 8000, 2000}} {
		got := h.confirmMilestone(buyer, id, ids[i]).expect(t, 200, "Milestone confirmed successfully").obj()
		m := got["milestones"].([]any)[i].(map[string]any)
		if m["status"] != "RELEASED" || m["releasedAt"] == nil {
			t.Fatalf("milestone %d after confirm: %v", i, m)
		}
		h.expectWallet(buyer, 9750, want.buyerEscrow)
		h.expectWallet(seller, want.seller, 0)
		h.expectWallet(helper, want.helper, 0)
		if i < 3 {
			if got["status"] != "ONGOING" {
				t.Fatalf("status after %d: %v", i, got["status"])
			}
			h.expectMerchant(0, 0)
			h.confirmMilestone(buyer, id, ids[i]).expect(t, 400, "Milestone has already been released")
		} else if got["status"] != "COMPLETED" || got["state"] != "CLOSED" {
			t.Fatalf("after the last milestone %v", got)
		}
	}
	h.expectMerchant(125, 0)
	h.expectPlatform(125)
	counts, _ := h.merchantLedger()
	if counts["commission"] != 1 || len(counts) != 1 {
		t.Fatalf("merchant ledger %v", counts)
	}
	if got := h.historyTotals(helper)["escrow_release"]; got != h.amount(2000) {
		t.Fatalf("beneficiary's records %s", got)
	}
	h.confirmMilestone(buyer, id, ids[3]).expect(t, 400, "Action not allowed")
	h.submitDispute(token, buyer, "too late").expect(t, 400, "All milestones have been released; there are no held funds to dispute")
	// Listings carry the milestones too.
	rows, _ := h.escrowPage("/v1/escrow/feeds", "", "")
	if len(rows) != 1 || len(rows[0]["milestones"].([]any)) != 4 {
		t.Fatalf("feed row %v", rows)
	}
	h.assertZeroSum()
	h.eventsDecodeAsEncodingJSONDoes()
}

// TestMilestoneRulesAndMessages: every rule of the milestone routes.
func TestMilestoneRulesAndMessages(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035558101")
	buyer := h.funded("b@x.com", "08035558102", 50000)
	other := h.newMerchant(false)
	foreign := h.do(req{method: "POST", path: "/v1/customer/create", key: key(other, "test", "super_admin"),
		body: map[string]any{"firstname": "F", "lastname": "G", "email": "f@x.com", "phone": "08035558199"}}).expect(t, 201, "").obj()["customerId"].(string)
	with := func(change func(b map[string]any)) map[string]any {
		b := milestoneBody("")
		ms := b["milestones"].([]map[string]any)
		ms[0]["customerId"] = nil
		change(b)
		return b
	}
	ms := func(b map[string]any) []map[string]any { return b["milestones"].([]map[string]any) }
	for _, tc := range []struct {
		body map[string]any
		msg  string
	}{
		{with(func(b map[string]any) { b["milestones"] = ms(b)[:1] }), "A milestone escrow needs at least 2 milestones"},
		{with(func(b map[string]any) { delete(b, "milestones") }), "A milestone escrow needs at least 2 milestones"},
		{with(func(b map[string]any) { ms(b)[3]["amount"] = 4001 }), "The sum of milestone amounts must equal the escrow amount"},
		{with(func(b map[string]any) { b["whoPays"] = "SELLER" }), "Milestone escrows allow whoPays buyer only"},
		{with(func(b map[string]any) { b["whoPays"] = "both" }), "Milestone escrows allow whoPays buyer only"},
		{with(func(b map[string]any) { ms(b)[1]["dueDate"] = "2020-01-01" }), "dueDate must be a future date"},
		{with(func(b map[string]any) { ms(b)[1]["dueDate"] = "soon" }), "milestones[1].dueDate must be a date (YYYY-MM-DD) or an RFC 3339 time"},
		{with(func(b map[string]any) { ms(b)[2]["amount"] = 2999.5; ms(b)[3]["amount"] = 4000.5 }), "milestones[2].amount must be a positive integer"},
		{with(func(b map[string]any) { ms(b)[2]["amount"] = 0; ms(b)[3]["amount"] = 7000 }), "milestones[2].amount must be a positive integer"},
		{with(func(b map[string]any) { delete(ms(b)[0], "amount") }), "milestones[0].amount is required"},
		{with(func(b map[string]any) { ms(b)[0]["title"] = "" }), "milestones[0].title is required"},
		{with(func(b map[string]any) { ms(b)[0]["customerId"] = foreign }), "milestones[0].customerId is not a customer of this merchant"},
		{with(func(b map[string]any) { b["milestones"] = "nope" }), "milestones must be an array of milestones"},
	} {
		h.createMilestones(seller, tc.body).expect(t, 400, tc.msg)
	}
	h.do(req{method: "POST", path: "/v1/escrow/milestone/create", key: key(other, "test", "standard"), body: with(func(map[string]any) {})}).
		expect(t, 401, "Merchant cannot create escrow for itself via API")
	// A business merchant sells as itself.
	if own := h.createMilestones("", with(func(map[string]any) {})).expect(t, 201, "").obj(); own["isMerchant"] != true {
		t.Fatalf("merchant's own milestone escrow %v", own)
	}

	// Edit replaces the set with new ids and recomputes the fee.
	e := h.createMilestones(seller, with(func(map[string]any) {})).expect(t, 201, "").obj()
	id, token := e["id"].(string), e["paymentToken"].(string)
	old := milestoneIDs(t, e)
	edited := h.do(req{method: "PUT", path: "/v1/escrow/milestone/edit/" + token, key: h.std(), cid: seller, body: map[string]any{
		"amount": 20000, "milestones": []map[string]any{{"title": "A", "amount": 15000}, {"title": "B", "amount": 5000}}}}).
		expect(t, 200, "Milestone escrow updated successfully").obj()
	if nu := milestoneIDs(t, edited); len(nu) != 2 || nu[0] == old[0] || edited["fee"] != 500.0 || edited["amount"] != 20000.0 {
		t.Fatalf("edited %v", edited)
	}
	h.do(req{method: "PUT", path: "/v1/escrow/milestone/edit/" + token, key: h.std(), cid: seller, body: map[string]any{"amount": 30000}}).
		expect(t, 400, "The sum of milestone amounts must equal the escrow amount")
	h.do(req{method: "PUT", path: "/v1/escrow/milestone/edit/" + token, key: h.std(), cid: buyer, body: map[string]any{"purpose": "x"}}).
		expect(t, 400, "Action not allowed")
	h.do(req{method: "PUT", path: "/v1/escrow/edit/" + token, key: h.std(), cid: seller, body: map[string]any{"purpose": "x"}}).
		expect(t, 400, "Action not allowed")
	h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + token, key: h.sa(), body: map[string]any{"additionalFee": 100}}).
		expect(t, 400, "An additional fee can only be set on a standard escrow")
	got := h.do(req{path: "/v1/escrow/milestone/" + token, key: h.std()}).expect(t, 200, "").obj()
	if got["id"] != id || len(got["milestones"].([]any)) != 2 {
		t.Fatalf("GET milestone %v", got)
	}

	// Conversion of a standard escrow.
	std := h.createEscrow(seller, map[string]string{"amount": "10000", "purpose": "Job", "whoPays": "seller"}, 0).expect(t, 201, "").obj()
	stoken := std["paymentToken"].(string)
	if v := h.do(req{path: "/v1/escrow/milestone/" + stoken, key: h.std()}).expect(t, 200, "").obj(); len(v["milestones"].([]any)) != 0 ||
		v["settlementType"] != "STANDARD" {
		t.Fatalf("standard escrow through the milestone route %v", v)
	}
	h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + stoken, key: h.sa(), body: map[string]any{"additionalFee": 100}}).expect(t, 200, "")
	conv := map[string]any{"milestones": []map[string]any{{"title": "A", "amount": 4000}, {"title": "B", "amount": 6000}}}
	h.do(req{method: "PUT", path: "/v1/escrow/milestone/convert/" + stoken, key: h.std(), cid: seller, body: conv}).
		expect(t, 400, "Remove the additional fee before converting")
	h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + stoken, key: h.sa(), body: map[string]any{"additionalFee": 0}}).expect(t, 200, "")
	h.do(req{method: "PUT", path: "/v1/escrow/milestone/convert/" + stoken, key: h.std(), cid: seller, body: map[string]any{}}).
		expect(t, 400, "milestones is required")
	c := h.do(req{method: "PUT", path: "/v1/escrow/milestone/convert/" + stoken, key: h.std(), cid: seller, body: conv}).
		expect(t, 200, "Escrow converted to a milestone escrow successfully").obj()
	if c["settlementType"] != "MILESTONE" || c["whoPays"] != "buyer" || len(c["milestones"].([]any)) != 2 {
		t.Fatalf("converted %v", c)
	}
	h.do(req{method: "PUT", path: "/v1/escrow/milestone/convert/" + stoken, key: h.std(), cid: seller, body: conv}).
		expect(t, 400, "Action not allowed")

	// Paid: no more edits; under dispute no confirms.
	sid := c["id"].(string)
	h.pay(buyer, "conv", 10250, sid).expect(t, 200, "")
	h.do(req{method: "PUT", path: "/v1/escrow/milestone/edit/" + stoken, key: h.std(), cid: seller, body: map[string]any{"purpose": "x"}}).
		expect(t, 400, "Action not allowed")
	sids := milestoneIDs(t, c)
	h.submitDispute(stoken, buyer, "stalled").expect(t, 200, "")
	h.confirmMilestone(buyer, sid, sids[0]).expect(t, 400, "Escrow is under dispute")
	h.expectWallet(seller, 0, 0)
	h.assertZeroSum()
}

// TestMilestoneDisputeOutcomes: after one milestone is released a ruling
// settles every remaining one at once.
func TestMilestoneDisputeOutcomes(t *testing.T) {
	for _, tc := range []struct {
		body                    map[string]any
		status, milestone       string
		buyerMain, seller, help float64
	}{
		// Held after the first release: 8,000 of milestones + 250 fee.
		{map[string]any{"status": "COMPLETED"}, "COMPLETED", "RELEASED", 9750, 8000, 2000},
		{map[string]any{"status": "REFUNDED"}, "REFUNDED", "REFUNDED", 9750 + 8000, 0, 2000},
		{map[string]any{"status": "SPLIT", "sellerAmount": 2500.5, "buyerAmount": 5499.5}, "SPLIT", "SPLIT", 9750 + 5499.5, 2500.5, 2000},
	} {
		t.Run(tc.status, func(t *testing.T) {
			h := newHarness(t)
			seller := h.createCustomer(h.sa(), "s@x.com", "08035558201")
			helper := h.createCustomer(h.sa(), "d@x.com", "08035558203")
			buyer := h.funded("b@x.com", "08035558202", 20000)
			e := h.createMilestones(seller, milestoneBody(helper)).expect(t, 201, "").obj()
			id, token := e["id"].(string), e["paymentToken"].(string)
			ids := milestoneIDs(t, e)
			h.pay(buyer, "p", 10250, id).expect(t, 200, "")
			h.confirmMilestone(buyer, id, ids[0]).expect(t, 200, "")
			h.submitDispute(token, buyer, "stalled").expect(t, 200, "")
			h.resolveDispute(id, map[string]any{"status": "SPLIT", "sellerAmount": 5000, "buyerAmount": 5000}).
				expect(t, 400, "sellerAmount and buyerAmount must add up to the held amount of 8000")
			got := h.resolveDispute(id, tc.body).expect(t, 200, "").obj()
			for i, m := range got["milestones"].([]any) {
				want := tc.milestone
				if i == 0 {
					want = "RELEASED"
				}
				if m.(map[string]any)["status"] != want {
					t.Fatalf("milestone %d: %v", i, m)
				}
			}
			if got["status"] != tc.status {
				t.Fatalf("status %v", got["status"])
			}
			h.expectWallet(buyer, tc.buyerMain, 0)
			h.expectWallet(seller, tc.seller, 0)
			h.expectWallet(helper, tc.help, 0)
			h.expectMerchant(125, 0)
			h.expectPlatform(125)
			h.assertZeroSum()
		})
	}
}

// TestMilestoneRaces: two confirms of a milestone release it once; a
// confirm racing a ruling never releases a milestone twice.
func TestMilestoneRaces(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035558301")
	buyer := h.funded("b@x.com", "08035558302", 100000)
	e := h.createMilestones(seller, milestoneBody(seller)).expect(t, 201, "").obj()
	id := e["id"].(string)
	ids := milestoneIDs(t, e)
	h.pay(buyer, "p", 10250, id).expect(t, 200, "")
	won := parallel(10, func(int) bool {
		r := h.confirmMilestone(buyer, id, ids[0])
		if r.Status != 200 && r.Message != "Milestone has already been released" {
			t.Errorf("confirm: %d %s", r.Status, r.Raw)
		}
		return r.Status == 200
	})
	if won != 1 {
		t.Fatalf("%d confirms released the first milestone", won)
	}
	h.expectWallet(seller, 2000, 0)

	for round := 0; round < 4; round++ {
		e := h.createMilestones(seller, milestoneBody(seller)).expect(t, 201, "").obj()
		id, token := e["id"].(string), e["paymentToken"].(string)
		ids := milestoneIDs(t, e)
		h.pay(buyer, fmt.Sprintf("r%d", round), 10250, id).expect(t, 200, "")
		h.confirmMilestone(buyer, id, ids[0]).expect(t, 200, "")
		h.confirmMilestone(buyer, id, ids[1]).expect(t, 200, "")
		h.confirmMilestone(buyer, id, ids[2]).expect(t, 200, "")
		before, _ := h.wallet(seller)
		delay := time.Duration(round) * 5 * time.Millisecond
		results := make([]resp, 2)
		parallel(2, func(i int) bool {
			if i == 0 {
				h.submitDispute(token, buyer, "last one")
				results[0] = h.resolveDispute(id, map[string]any{"status": "REFUNDED"})
			} else {
				time.Sleep(delay)
				results[1] = h.confirmMilestone(buyer, id, ids[3])
			}
			return true
		})
		v := h.viewEscrow(token, "")
		after, _ := h.wallet(seller)
		switch v["status"] {
		case "COMPLETED": // the confirm won: the last milestone paid once
			if after-before != h.amount(4000) || results[0].Status == 200 {
				t.Fatalf("round %d: completed, seller +%s, ruling %d", round, after-before, results[0].Status)
			}
		case "REFUNDED":
			if after != before || results[1].Status == 200 {
				t.Fatalf("round %d: refunded, seller +%s, confirm %d", round, after-before, results[1].Status)
			}
		case "DISPUTED": // the ruling came before the dispute
			if results[1].Status == 200 {
				t.Fatalf("round %d: confirmed while disputed", round)
			}
			h.resolveDispute(id, map[string]any{"status": "REFUNDED"}).expect(t, 200, "")
		default:
			t.Fatalf("round %d: %v", round, v["logs"])
		}
		t.Logf("round %d: %v", round, v["logs"])
	}
	counts, _ := h.merchantLedger()
	if counts["commission"] != 5-1 { // the first escrow is still open
		t.Fatalf("commissions %v", counts)
	}
	h.assertZeroSum()
}
