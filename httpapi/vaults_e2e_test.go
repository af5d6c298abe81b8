package httpapi

import (
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/money"
)

// Vault helpers: all through real HTTP, merchant only.

func stakesOf(pairs ...any) []map[string]any {
	var out []map[string]any
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, map[string]any{"customerId": pairs[i], "amount": pairs[i+1]})
	}
	return out
}

func (h *harness) createVault(participants any) resp {
	h.t.Helper()
	return h.do(req{method: "POST", path: "/v1/escrow/vault/create", key: h.std(),
		body: map[string]any{"purpose": "Office pool", "description": "Final score", "participants": participants}})
}

func (h *harness) vaultWinner(token string, winner any) resp {
	h.t.Helper()
	return h.do(req{method: "POST", path: "/v1/escrow/vault/winner/" + token, key: h.std(), body: map[string]any{"winnerId": winner}})
}

func (h *harness) vaultCancel(token string) resp {
	h.t.Helper()
	return h.do(req{method: "POST", path: "/v1/escrow/vault/cancel/" + token, key: h.std()})
}

func (h *harness) getVault(token string) map[string]any {
	h.t.Helper()
	return h.do(req{path: "/v1/escrow/vault/" + token, key: h.std()}).expect(h.t, 200, "Escrow fetched successfully").obj()
}

// expectParticipants checks a vault's participants: ids and stakes in
// order, all with status and stakedAt as a Unix-seconds string, settledAt
// set exactly when settled.
func expectParticipants(t *testing.T, v map[string]any, status string, settled bool, pairs ...any) {
	t.Helper()
	ps, ok := v["participants"].([]any)
	if !ok || len(ps) != len(pairs)/2 {
		t.Fatalf("participants %v", v["participants"])
	}
	for i, x := range ps {
		p := x.(map[string]any)
		staked, err := strconv.ParseInt(fmt.Sprint(p["stakedAt"]), 10, 64)
		if p["customerId"] != pairs[2*i] || p["amount"] != float64(pairs[2*i+1].(int)) || p["status"] != status ||
			err != nil || time.Since(time.Unix(staked, 0)) > time.Minute {
			t.Fatalf("participant %d: %v", i, p)
		}
		if _, isString := p["settledAt"].(string); isString != settled || (!settled && p["settledAt"] != nil) {
			t.Fatalf("participant %d settledAt %v", i, p["settledAt"])
		}
	}
}

// TestVaultSettlementBalances creates a vault of three stakes (pot 1,500,
// fee 37.5 rounded half-up to 38, commission 19) and settles it by a winner
// and by a cancel: exact balances of every participant, the merchant and
// the platform, the records that explain them, and the zero sum.
func TestVaultSettlementBalances(t *testing.T) {
	for _, tc := range []struct {
		name      string
		settle    func(h *harness, token string, ids []string) resp
		message   string
		status    string
		partState string
		mains     []float64 // after settling (each started with 5,000 and staked 500)
		records   []map[string]money.Amount
	}{
		{name: "winner", settle: func(h *harness, token string, ids []string) resp { return h.vaultWinner(token, ids[1]) },
			message: "Vault winner declared successfully", status: "COMPLETED", partState: "RELEASED",
			mains: []float64{4500, 4500 + 1500 - 38, 4500}},
		// Fee shares 12.67, 12.67, 12.66 (38 over three equal stakes, the
		// two kobo left to the first two).
		{name: "cancel", settle: func(h *harness, token string, _ []string) resp { return h.vaultCancel(token) },
			message: "Vault cancelled successfully", status: "REFUNDED", partState: "REFUNDED",
			mains: []float64{4500 + 487.33, 4500 + 487.33, 4500 + 487.34}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			var ids []string
			for i := 0; i < 3; i++ {
				ids = append(ids, h.funded(fmt.Sprintf("p%d@x.com", i), fmt.Sprintf("0803555800%d", i), 5000))
			}
			v := h.createVault(stakesOf(ids[0], 500, ids[1], "500", ids[2], 500.0)).expect(t, 201, "Vault created successfully").obj()
			token := v["paymentToken"].(string)
			if v["settlementType"] != "VAULT" || v["state"] != "OPENED" || v["status"] != "ONGOING" || v["amount"] != 1500.0 ||
				v["fee"] != 38.0 || v["winnerId"] != nil || fmt.Sprint(v["logs"]) != "[ONGOING]" || v["purpose"] != "Office pool" ||
				v["description"] != "Final score" || v["completedAt"] != nil || v["paidAt"] != nil || v["merchantId"] != h.m.MerchantID {
				t.Fatalf("created vault %v", v)
			}
			expectParticipants(t, v, "STAKED", false, ids[0], 500, ids[1], 500, ids[2], 500)
			if got := h.getVault(token); !reflect.DeepEqual(got, v) {
				t.Fatalf("read after create\n%s\n%s", jsonOf(got), jsonOf(v))
			}
			if got := h.viewEscrow(token, ""); !reflect.DeepEqual(got, v) {
				t.Fatalf("verify shows the vault like every escrow\n%s\n%s", jsonOf(got), jsonOf(v))
			}
			for _, id := range ids {
				h.expectWallet(id, 4500, 500)
			}
			h.expectMerchant(0, 0)
			h.expectPlatform(0)

			got := tc.settle(h, token, ids).expect(t, 200, tc.message).obj()
			if got["status"] != tc.status || got["state"] != "CLOSED" || got["completedAt"] == nil ||
				fmt.Sprint(got["logs"]) != "[ONGOING "+tc.status+"]" {
				t.Fatalf("settled vault %v", got)
			}
			expectParticipants(t, got, tc.partState, true, ids[0], 500, ids[1], 500, ids[2], 500)
			if tc.status == "COMPLETED" && (got["winnerId"] != ids[1] || got["refundedBy"] != nil) ||
				tc.status == "REFUNDED" && (got["winnerId"] != nil || got["refundedBy"] != h.m.MerchantID) {
				t.Fatalf("winnerId %v refundedBy %v", got["winnerId"], got["refundedBy"])
			}
			if v := h.getVault(token); !reflect.DeepEqual(v, got) {
				t.Fatalf("read after settle\n%s\n%s", jsonOf(v), jsonOf(got))
			}
			for i, id := range ids {
				h.expectWallet(id, tc.mains[i], 0)
			}
			h.expectMerchant(19, 0)
			h.expectPlatform(19)
			counts, totals := h.merchantLedger()
			if !reflect.DeepEqual(counts, map[string]int{"commission": 1}) || totals["commission"] != h.amount(19) {
				t.Fatalf("merchant ledger %v %v", counts, totals)
			}
			// Each participant's history explains its balance: the stake
			// (a debit) and what came back.
			for i, id := range ids {
				want := map[string]money.Amount{"deposit": h.amount(5000), "vault_stake": h.amount(500)}
				if back := h.amount(tc.mains[i] - 4500); tc.status == "REFUNDED" {
					want["vault_refund"] = back
				} else if back > 0 {
					want["vault_payout"] = back
				}
				if got := h.historyTotals(id); !reflect.DeepEqual(got, want) {
					t.Fatalf("history of participant %d: %v, want %v", i, got, want)
				}
			}
			stake := h.do(req{path: "/v1/payment/history?type=vault_stake", key: h.std(), cid: ids[0]}).expect(t, 200, "").obj()["data"].([]any)
			if r := stake[0].(map[string]any); len(stake) != 1 || r["creditType"] != "debit" || r["status"] != "success" ||
				r["reference"] != "ESC-"+v["id"].(string)+"-stake-"+ids[0] {
				t.Fatalf("stake record %v", stake)
			}

			// Settled once: winner, cancel, a dispute, a split, an additional
			// fee, a payment all refuse and move nothing.
			h.vaultWinner(token, ids[0]).expect(t, 400, "Vault is already settled")
			h.vaultCancel(token).expect(t, 400, "Vault is already settled")
			h.submitDispute(token, ids[0], "unfair").expect(t, 400, "Vault escrows cannot be disputed")
			h.resolveDispute(v["id"].(string), map[string]any{"status": "SPLIT", "sellerAmount": 1, "buyerAmount": 1}).
				expect(t, 400, "Escrow is not under dispute")
			h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + token, key: h.sa(), body: map[string]any{"additionalFee": 10}}).
				expect(t, 400, "An additional fee can only be set on a standard escrow")
			h.pay(ids[0], "pay-vault", 1500, v["id"]).expect(t, 400, "Escrow is not in a valid state for checkout")
			for i, id := range ids {
				h.expectWallet(id, tc.mains[i], 0)
			}
			h.assertZeroSum()
		})
	}
}

// TestVaultRulesAndMessages: every refusal of the vault routes, and that a
// refused create moves nothing.
func TestVaultRulesAndMessages(t *testing.T) {
	h := newHarness(t)
	a := h.funded("a@x.com", "08035558101", 3000)
	b := h.funded("b@x.com", "08035558102", 1000)
	broke := h.createCustomer(h.sa(), "c@x.com", "08035558103")
	blocked := h.funded("d@x.com", "08035558104", 2000)
	h.do(req{method: "PUT", path: "/v1/customer/block/" + blocked, key: h.sa(), body: map[string]any{"reason": "fraud"}}).expect(t, 200, "")
	other := h.newMerchant(false)
	otherKey := key(other, domain.Test, "standard")
	foreign := h.createCustomer(key(other, domain.Test, "super_admin"), "f@x.com", "08035558105")

	// customer-id is forbidden on all four; a key is required.
	for _, r := range []req{
		{method: "POST", path: "/v1/escrow/vault/create", body: map[string]any{}},
		{method: "POST", path: "/v1/escrow/vault/winner/PT_X", body: map[string]any{}},
		{method: "POST", path: "/v1/escrow/vault/cancel/PT_X"},
		{method: "GET", path: "/v1/escrow/vault/PT_X"},
	} {
		r.key, r.cid = h.std(), a
		h.do(r).expect(t, 400, "customer-id is not allowed in request header")
		r.key, r.cid = "", ""
		h.do(r).expect(t, 401, "No token provided")
	}

	for _, tc := range []struct {
		name string
		body any
		msg  string
	}{
		{"no participants", map[string]any{"purpose": "p"}, "A vault needs at least 2 unique participants"},
		{"one participant", map[string]any{"purpose": "p", "participants": stakesOf(a, 1000)}, "A vault needs at least 2 unique participants"},
		{"one customer twice", map[string]any{"purpose": "p", "participants": stakesOf(a, 600, a, 600)}, "A vault needs at least 2 unique participants"},
		{"a repeat", map[string]any{"purpose": "p", "participants": stakesOf(a, 600, b, 600, a, 1)}, "participants[2].customerId repeats a participant"},
		{"pot short", map[string]any{"purpose": "p", "participants": stakesOf(a, 500, b, 499)}, "Vault pot must be at least 1000"},
		{"no purpose", map[string]any{"participants": stakesOf(a, 500, b, 500)}, "purpose is required"},
		{"purpose not a string", map[string]any{"purpose": 5, "participants": stakesOf(a, 500, b, 500)}, "purpose has the wrong type"},
		{"participants not an array", map[string]any{"purpose": "p", "participants": "a,b"}, "participants must be an array of {customerId, amount}"},
		{"customerId not a string", map[string]any{"purpose": "p", "participants": stakesOf(7, 500, b, 500)}, "participants[0].customerId must be a string"},
		{"no customerId", map[string]any{"purpose": "p", "participants": []map[string]any{{"amount": 500}, {"customerId": b, "amount": 500}}},
			"participants[0].customerId is required"},
		{"no amount", map[string]any{"purpose": "p", "participants": []map[string]any{{"customerId": a, "amount": 500}, {"customerId": b}}},
			"participants[1].amount is required"},
		{"kobo", map[string]any{"purpose": "p", "participants": stakesOf(a, 500.5, b, 500)}, "participants[0].amount must be a positive integer"},
		{"not a number", map[string]any{"purpose": "p", "participants": stakesOf(a, 500, b, "lots")}, "participants[1].amount must be a positive integer"},
		{"zero", map[string]any{"purpose": "p", "participants": stakesOf(a, 1000, b, 0)}, "participants[1].amount must be a positive integer"},
		{"negative", map[string]any{"purpose": "p", "participants": stakesOf(a, 2000, b, -1)}, "participants[1].amount must be a positive integer"},
		{"unknown customer", map[string]any{"purpose": "p", "participants": stakesOf(a, 500, "nobody", 500)},
			"Participant nobody is not a customer of this merchant"},
		{"another merchant's customer", map[string]any{"purpose": "p", "participants": stakesOf(a, 500, foreign, 500)},
			"Participant " + foreign + " is not a customer of this merchant"},
		{"blocked customer", map[string]any{"purpose": "p", "participants": stakesOf(a, 500, blocked, 500)},
			"The account of participant " + blocked + " is disabled"},
		// All or nothing: a's stake is covered, b's is not by one naira.
		{"one stake short", map[string]any{"purpose": "p", "participants": stakesOf(a, 3000, b, 1001)}, "Insufficient balance for participant " + b},
		{"an empty wallet", map[string]any{"purpose": "p", "participants": stakesOf(a, 500, b, 500, broke, 1)}, "Insufficient balance for participant " + broke},
	} {
		r := h.do(req{method: "POST", path: "/v1/escrow/vault/create", key: h.std(), body: tc.body})
		if r.Status != 400 || r.Message != tc.msg {
			t.Errorf("%s: %d %s, want 400 %q", tc.name, r.Status, r.Raw, tc.msg)
		}
	}
	h.do(req{method: "POST", path: "/v1/escrow/vault/create", key: h.std(), body: "{"}).expect(t, 400, "Invalid JSON body")
	h.do(req{method: "POST", path: "/v1/escrow/vault/create", key: h.std(),
		body: map[string]any{"purpose": "p", "categoryId": "nope", "participants": stakesOf(a, 500, b, 500)}}).expect(t, 404, "Category not found")
	h.expectWallet(a, 3000, 0)
	h.expectWallet(b, 1000, 0)
	h.do(req{method: "PUT", path: "/v1/customer/unblock/" + blocked, key: h.sa(), body: map[string]any{}}).expect(t, 200, "")
	h.expectWallet(blocked, 2000, 0)

	// Exactly the balance is enough; the super-admin key may create too.
	v := h.do(req{method: "POST", path: "/v1/escrow/vault/create", key: h.sa(),
		body: map[string]any{"purpose": "p", "participants": stakesOf(a, 3000, b, 1000)}}).expect(t, 201, "Vault created successfully").obj()
	id, token := v["id"].(string), v["paymentToken"].(string)
	h.expectWallet(a, 0, 3000)
	h.expectWallet(b, 0, 1000)

	h.vaultWinner(token, "nobody").expect(t, 400, "Winner must be a vault participant")
	h.vaultWinner(token, "").expect(t, 400, "winnerId is required")
	h.vaultWinner(token, nil).expect(t, 400, "winnerId is required")
	h.vaultWinner(token, 5).expect(t, 400, "winnerId must be a string")
	h.vaultWinner(token, broke).expect(t, 400, "Winner must be a vault participant")
	h.vaultWinner("PT_NOSUCHTOKEN0000000", a).expect(t, 400, "Escrow not found")
	h.vaultCancel("PT_NOSUCHTOKEN0000000").expect(t, 400, "Escrow not found")
	h.do(req{path: "/v1/escrow/vault/PT_NOSUCHTOKEN0000000", key: h.std()}).expect(t, 400, "Escrow not found")
	// Another merchant can neither settle nor read it.
	h.do(req{method: "POST", path: "/v1/escrow/vault/winner/" + token, key: otherKey, body: map[string]any{"winnerId": a}}).
		expect(t, 400, "Escrow does not belong to this merchant")
	h.do(req{method: "POST", path: "/v1/escrow/vault/cancel/" + token, key: otherKey}).expect(t, 400, "Escrow does not belong to this merchant")
	h.do(req{path: "/v1/escrow/vault/" + token, key: otherKey}).expect(t, 400, "Escrow does not belong to this merchant")
	// A standard escrow is no vault.
	std := h.createEscrow(a, map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer"}, 0).expect(t, 201, "").obj()
	h.vaultWinner(std["paymentToken"].(string), a).expect(t, 400, "Action not allowed")
	h.vaultCancel(std["paymentToken"].(string)).expect(t, 400, "Action not allowed")
	if got := h.getVault(std["paymentToken"].(string)); got["participants"] != nil || got["settlementType"] != "STANDARD" {
		t.Fatalf("a standard escrow read as a vault: %v", got)
	}
	// The vault is in the merchant's feed like every escrow.
	rows, _ := h.escrowPage("/v1/escrow/feeds?paymentToken="+token, "", "")
	if len(rows) != 1 || rows[0]["id"] != id || rows[0]["settlementType"] != "VAULT" {
		t.Fatalf("feed %v", rows)
	}
	h.expectWallet(a, 0, 3000)
	h.vaultWinner(token, a).expect(t, 200, "Vault winner declared successfully")
	h.expectWallet(a, 4000-100, 0) // pot 4,000, fee 100
	h.expectWallet(b, 0, 0)
	h.assertZeroSum()
}

// TestVaultWinnerRacingCancel: winners and cancels of one vault at once
// through the API settle it once; every other call finds it settled.
func TestVaultWinnerRacingCancel(t *testing.T) {
	h := newHarness(t)
	var ids []string
	for i := 0; i < 3; i++ {
		ids = append(ids, h.funded(fmt.Sprintf("r%d@x.com", i), fmt.Sprintf("0803555820%d", i), 10000))
	}
	for round := 0; round < 3; round++ {
		token := h.createVault(stakesOf(ids[0], 1000, ids[1], 1000, ids[2], 1010)).expect(t, 201, "").obj()["paymentToken"].(string)
		results := make([]resp, 8)
		won := parallel(len(results), func(i int) bool {
			if (i+round)%2 == 0 {
				results[i] = h.vaultCancel(token)
			} else {
				results[i] = h.vaultWinner(token, ids[i%3])
			}
			return results[i].Status == 200
		})
		for _, r := range results {
			if r.Status != 200 && (r.Status != 400 || r.Message != "Vault is already settled") {
				t.Fatalf("round %d: %d %s", round, r.Status, r.Raw)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d settlements", round, won)
		}
		t.Logf("round %d: %v", round, h.getVault(token)["status"])
	}
	counts, _ := h.merchantLedger()
	if counts["commission"] != 3 {
		t.Fatalf("commissions %v", counts)
	}
	// Whatever won, the money adds up: the three stakes came back out of
	// escrow, and the participants lost exactly the three fees (75 each).
	var sum money.Amount
	for _, id := range ids {
		m, e := h.wallet(id)
		if e != 0 {
			t.Fatalf("escrow of %s left at %s", id, e)
		}
		sum += m
	}
	if sum != h.amount(30000-3*75) {
		t.Fatalf("participants hold %s", sum)
	}
	h.expectPlatform(3 * 37.5)
	h.assertZeroSum()
}

// TestWebhooksVault: a vault announces escrow.created and escrow.ongoing
// when created, and escrow.completed or escrow.refunded when settled, each
// with the vault as the API shows it then; its commission is announced
// once. Stakes, payouts and refunds are internal legs and announce nothing.
func TestWebhooksVault(t *testing.T) {
	h := newWebhookHarness(t)
	rc, a, b, topUpB, answered := hookedSellerAndBuyer(t, h, "08035558301", "08035558302")
	top := h.topUp(a, 5000).expect(t, 200, "").obj()
	delete(top, "mainBalance") // the answer's, not the record's
	answered[top["reference"].(string)] = top

	won := h.createVault(stakesOf(a, 1000, b, 3000)).expect(t, 201, "").obj()
	wonID, wonToken := won["id"].(string), won["paymentToken"].(string)
	created := h.escrowByToken(wonToken)
	h.vaultWinner(wonToken, a).expect(t, 200, "")
	completed := h.escrowByToken(wonToken)
	cancelled := h.createVault(stakesOf(a, 500, b, 500)).expect(t, 201, "").obj()
	cID, cToken := cancelled["id"].(string), cancelled["paymentToken"].(string)
	cCreated := h.escrowByToken(cToken)
	h.vaultCancel(cToken).expect(t, 200, "")
	refunded := h.escrowByToken(cToken)

	hits := h.allWebhooks(rc)
	byKey, order := escrowHits(t, hits)
	for k, want := range map[string]map[string]any{
		"escrow.created " + wonID: created, "escrow.ongoing " + wonID: created, "escrow.completed " + wonID: completed,
		"escrow.created " + cID: cCreated, "escrow.ongoing " + cID: cCreated, "escrow.refunded " + cID: refunded,
	} {
		hh, ok := byKey[k]
		if !ok {
			t.Fatalf("no %s in %v", k, order)
		}
		if !reflect.DeepEqual(hh.Data, want) {
			t.Fatalf("%s payload differs from the API's escrow:\n%s\n%s", k, jsonOf(hh.Data), jsonOf(want))
		}
	}
	if len(byKey) != 6 || !(order["escrow.created "+wonID] < order["escrow.ongoing "+wonID] &&
		order["escrow.ongoing "+wonID] < order["escrow.completed "+wonID]) {
		t.Fatalf("escrow events %v", order)
	}
	got := paymentPayloads(t, hits, h.apiRecords(a, b), answered)
	want := map[string]int{
		"payment.deposit.success " + topUpB:                       1,
		"payment.deposit.success " + top["reference"].(string):    1,
		"payment.commission.success ESC-" + wonID + "-commission": 1,
		"payment.commission.success ESC-" + cID + "-commission":   1,
	}
	if !reflect.DeepEqual(got, want) || len(hits) != len(want)+6 {
		t.Fatalf("payment events\n got %v\nwant %v", got, want)
	}
}
