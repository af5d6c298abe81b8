package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/audit"
)

var (
	recordIDShape = regexp.MustCompile(`^[0-9a-f]{24}$`)
	tokenShape    = regexp.MustCompile(`^PY_[0-9A-Za-z]{20,}$`)
)

// wantRecordID fails unless id has the public API's shape and its first
// four bytes are a creation time within [from, to] (whole seconds).
func wantRecordID(t *testing.T, what string, v any, from, to time.Time) string {
	t.Helper()
	id, _ := v.(string)
	if !recordIDShape.MatchString(id) {
		t.Fatalf("%s id %q is not 24 lowercase hex characters", what, id)
	}
	b, _ := hex.DecodeString(id[:8])
	at := int64(b[0])<<24 | int64(b[1])<<16 | int64(b[2])<<8 | int64(b[3])
	if at < from.Unix() || at > to.Unix() {
		t.Fatalf("%s id %q: time %d outside [%d, %d]", what, id, at, from.Unix(), to.Unix())
	}
	return id
}

// TestIDsHaveThePublicAPIShape: every kind of record the API issues ids
// for gets 24 lowercase hex characters (creation time, then random), and
// escrows payment tokens PY_ and base62.
func TestIDsHaveThePublicAPIShape(t *testing.T) {
	h := newHarness(t)
	from := time.Now().Add(-time.Second)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035557001")
	helper := h.createCustomer(h.sa(), "d@x.com", "08035557003")
	buyer := h.funded("b@x.com", "08035557002", 40000)
	cat := h.do(req{method: "POST", path: "/v1/escrow/category/create", key: h.sa(), body: catBody("Phones")}).expect(t, 201, "").obj()
	e := h.createEscrow(seller, map[string]string{"amount": "10000", "purpose": "Phone", "whoPays": "buyer",
		"categoryId": cat["id"].(string)}, 0).expect(t, 201, "Escrow created successfully").obj()
	m := h.createMilestones(seller, milestoneBody(helper)).expect(t, 201, "Milestone escrow created successfully").obj()
	staker := h.funded("v@x.com", "08035557004", 1000)
	v := h.createVault([]map[string]any{{"customerId": buyer, "amount": 1000}, {"customerId": staker, "amount": 1000}}).
		expect(t, 201, "").obj()
	h.vaultWinner(v["paymentToken"].(string), staker).expect(t, 200, "")
	paid := h.pay(buyer, "ids-pay-1", 10250, e["id"]).expect(t, 200, "Payment successful").obj()
	h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + e["id"].(string), key: h.std(), cid: buyer}).expect(t, 200, "")
	wl := h.do(req{method: "POST", path: "/v1/whitelist-address", key: h.std(), cid: buyer,
		body: whitelistBody(bscAddr(1))}).expect(t, 201, "").obj()
	to := time.Now().Add(time.Second)

	for _, c := range []struct {
		what string
		id   any
	}{
		{"customer", seller}, {"customer", buyer}, {"category", cat["id"]}, {"escrow", e["id"]}, {"milestone escrow", m["id"]},
		{"vault", v["id"]}, {"payment", paid["id"]}, {"whitelisted address", wl["id"]},
	} {
		wantRecordID(t, c.what, c.id, from, to)
	}
	for _, ms := range m["milestones"].([]any) {
		wantRecordID(t, "milestone", ms.(map[string]any)["id"], from, to)
	}
	for _, tok := range []any{e["paymentToken"], m["paymentToken"], v["paymentToken"]} {
		if s, _ := tok.(string); !tokenShape.MatchString(s) {
			t.Fatalf("payment token %q", s)
		}
	}
	// Every transaction record (top-ups, the payment, the settlement's
	// release and commission, the vault's stakes and payout) has the shape
	// too, the merchant's and the customers'.
	for _, path := range []string{"/v1/merchant/transactions?limit=100"} {
		rows, _ := h.listingPageOf(path, h.sa(), "", "")
		for _, r := range rows {
			wantRecordID(t, "transaction "+r["transactionType"].(string), r["id"], from, to)
		}
	}
	for _, cid := range []string{buyer, seller, staker} {
		rows, _ := h.escrowPage("/v1/payment/history?limit=100", cid, "")
		if len(rows) == 0 {
			t.Fatalf("no history of %s", cid)
		}
		for _, r := range rows {
			wantRecordID(t, "transaction "+r["transactionType"].(string), r["id"], from, to)
		}
	}
}

// earlierIDs issues ids as builds before the public API's shapes did:
// UUIDs for records and PT_ and 20 of [A-Z0-9] for payment tokens.
func earlierIDs() app.IDs {
	return app.IDs{
		Record: func(time.Time) string { return uuid.Must(uuid.NewV7()).String() },
		PaymentToken: func() string {
			const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
			b := make([]byte, 20)
			_, _ = rand.Read(b)
			for i := range b {
				b[i] = alphabet[int(b[i])%len(alphabet)]
			}
			return "PT_" + string(b)
		},
	}
}

// walk pages through a listing one row at a time with the cursor
// (startingAfter) and returns the rows' values of field.
func (h *harness) walk(path, key, cid, field string) []string {
	h.t.Helper()
	var out []string
	next := ""
	for i := 0; i < 100; i++ {
		q := path + "?limit=1"
		if next != "" {
			q += "&startingAfter=" + url.QueryEscape(next)
		}
		rows, pg := h.listingPageOf(q, key, cid, "")
		for _, r := range rows {
			out = append(out, fmt.Sprint(r[field]))
		}
		next, _ = pg["nextCursor"].(string)
		if next == "" {
			return out
		}
	}
	h.t.Fatalf("%s: more than 100 pages", path)
	return nil
}

// TestIDsOfEarlierBuildsStillResolve: records whose events an earlier
// build wrote (UUID ids, PT_ tokens) keep working beside new ones in
// every lookup, filter, cursor, payment, settlement and the audit's
// replay.
func TestIDsOfEarlierBuildsStillResolve(t *testing.T) {
	h := newHarness(t)
	current := h.svc.IDs
	h.svc.IDs = earlierIDs()
	oldSeller := h.createCustomer(h.sa(), "os@x.com", "08035556001")
	oldBuyer := h.funded("ob@x.com", "08035556002", 40000)
	oldCat := h.do(req{method: "POST", path: "/v1/escrow/category/create", key: h.sa(), body: catBody("Old")}).expect(t, 201, "").obj()["id"].(string)
	old := h.createEscrow(oldSeller, map[string]string{"amount": "10000", "purpose": "Old phone", "whoPays": "buyer",
		"categoryId": oldCat}, 0).expect(t, 201, "Escrow created successfully").obj()
	oldMs := h.createMilestones(oldSeller, milestoneBody(oldBuyer)).expect(t, 201, "Milestone escrow created successfully").obj()
	oldAddr := h.do(req{method: "POST", path: "/v1/whitelist-address", key: h.std(), cid: oldBuyer,
		body: whitelistBody(bscAddr(2))}).expect(t, 201, "").obj()["id"].(string)
	oldID, oldToken := old["id"].(string), old["paymentToken"].(string)
	if uuid.Validate(oldSeller) != nil || uuid.Validate(oldID) != nil || oldToken[:3] != "PT_" {
		t.Fatalf("the earlier build's ids were not issued: %s %s %s", oldSeller, oldID, oldToken)
	}
	h.svc.IDs = current

	newBuyer := h.funded("nb@x.com", "08035556003", 40000)
	newSeller := h.createCustomer(h.sa(), "ns@x.com", "08035556004")
	if !recordIDShape.MatchString(newBuyer) {
		t.Fatalf("new customer id %q", newBuyer)
	}

	// Lookups by path parameter.
	h.do(req{path: "/v1/customer/get/" + oldSeller, key: h.std()}).expect(t, 200, "")
	h.do(req{method: "PUT", path: "/v1/customer/update/" + oldSeller, key: h.sa(), body: map[string]any{"firstname": "Tolu"}}).expect(t, 200, "")
	h.do(req{path: "/v1/escrow/category/get/" + oldCat, key: h.std()}).expect(t, 200, "")
	if got := h.do(req{path: "/v1/escrow/verify/" + oldToken, key: h.std(), cid: oldSeller}).expect(t, 200, "").obj(); got["id"] != oldID || got["isSeller"] != true {
		t.Fatalf("verify by an earlier token: %v", got)
	}
	h.do(req{method: "PUT", path: "/v1/escrow/edit/" + oldToken, key: h.std(), cid: oldSeller,
		body: map[string]any{"description": "Edited after the upgrade"}}).expect(t, 200, "")
	// An escrow of an earlier build sold to a new buyer, and a new escrow
	// sold to an earlier buyer, with a category of an earlier build.
	fresh := h.createEscrow(newSeller, map[string]string{"amount": "10000", "purpose": "New phone", "whoPays": "buyer",
		"categoryId": oldCat}, 0).expect(t, 201, "Escrow created successfully").obj()
	h.pay(newBuyer, "old-ids-1", 10250, oldID).expect(t, 200, "Payment successful")
	h.pay(oldBuyer, "old-ids-2", 10250, fresh["id"]).expect(t, 200, "Payment successful")
	h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + oldID, key: h.std(), cid: newBuyer}).expect(t, 200, "")
	// The earlier milestone escrow: paid by a new buyer, its first
	// milestone (an earlier id, to an earlier beneficiary) released.
	h.pay(newBuyer, "old-ids-3", 10250, oldMs["id"]).expect(t, 200, "Payment successful")
	firstMilestone := oldMs["milestones"].([]any)[0].(map[string]any)["id"].(string)
	h.confirmMilestone(newBuyer, oldMs["id"].(string), firstMilestone).expect(t, 200, "")
	// A dispute over the new escrow an earlier buyer paid, read by id.
	h.submitDispute(fresh["paymentToken"].(string), oldBuyer, "Not as described").expect(t, 200, "")
	h.do(req{path: "/v1/escrow/dispute/get/" + fresh["id"].(string), key: h.std(), cid: oldBuyer}).expect(t, 200, "")
	// A checkout session for an earlier customer.
	link := h.createEscrow(oldSeller, map[string]string{"amount": "2000", "purpose": "Case", "whoPays": "buyer"}, 0).
		expect(t, 201, "Escrow created successfully").obj()
	h.do(req{method: "POST", path: "/v1/checkout/sessions", key: h.std(),
		body: map[string]any{"paymentToken": link["paymentToken"], "customerId": oldBuyer}}).expect(t, 201, "")

	// Filters by ids of both shapes.
	for _, c := range []struct {
		path, want string
	}{
		{"/v1/escrow/feeds?customerId=" + oldSeller, oldToken},
		{"/v1/escrow/feeds?paymentToken=" + oldToken, oldToken},
		{"/v1/escrow/feeds?categoryId=" + oldCat, oldToken},
		{"/v1/escrow/feeds?categoryId=" + oldCat, fresh["paymentToken"].(string)},
		{"/v1/escrow/feeds?customerId=" + newBuyer, oldToken},
	} {
		rows, _ := h.escrowPage(c.path, "", "")
		if !slices.Contains(tokensOf(rows), c.want) {
			t.Fatalf("%s: %v lacks %s", c.path, tokensOf(rows), c.want)
		}
	}
	if r := h.do(req{path: "/v1/customers?email=os@x.com", key: h.std()}).expect(t, 200, "").obj(); fmt.Sprint(r["data"]) == "[]" {
		t.Fatalf("lookup by email of an earlier customer: %v", r)
	}

	// Cursors over rows of both shapes: each walk sees every row once.
	customers := h.walk("/v1/customers", h.std(), "", "customerId")
	if len(customers) != 4 || !slices.Contains(customers, oldSeller) || !slices.Contains(customers, newBuyer) {
		t.Fatalf("customers walked with cursors: %v", customers)
	}
	feeds := h.walk("/v1/escrow/feeds", h.std(), "", "paymentToken")
	if len(feeds) != 4 || !slices.Contains(feeds, oldToken) {
		t.Fatalf("escrows walked with cursors: %v", feeds)
	}
	history := h.walk("/v1/payment/history", h.std(), oldBuyer, "id")
	if len(history) < 3 || uuid.Validate(history[len(history)-1]) != nil {
		t.Fatalf("an earlier customer's history walked with cursors: %v (the first, its top-up, an earlier id)", history)
	}
	h.walk("/v1/merchant/transactions", h.sa(), "", "id")
	h.do(req{method: "DELETE", path: "/v1/whitelist-address/" + oldAddr, key: h.std(), cid: oldBuyer}).expect(t, 200, "")

	// The audit replays every event of both shapes and finds the read
	// models as the events say.
	h.caughtUp()
	rep, err := audit.Run(context.Background(), h.store, h.pool, h.m.MerchantID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Differences) != 0 {
		t.Fatalf("audit differences: %+v", rep.Differences)
	}
}
