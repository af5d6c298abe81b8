package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/payment"
)

// TestEventsAreBounded: a request with every field at its cap is stored,
// in events under domain.MaxEventBytes (fifty milestones with the longest
// titles and descriptions); one past a cap is refused, 400 naming it, and
// nothing of it is stored. The counts that grow an event with their
// elements (milestones, a vault's participants, the escrows of one
// payment) are capped likewise.
func TestEventsAreBounded(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "seller@example.com", "08030000001")
	milestones := func(n int, title, descr string) []map[string]any {
		var ms []map[string]any
		for range n {
			ms = append(ms, map[string]any{"title": title, "description": descr, "amount": 200})
		}
		return ms
	}
	body := func(ms []map[string]any) map[string]any {
		return map[string]any{"amount": 200 * len(ms), "purpose": strings.Repeat("p", 200), "whoPays": "buyer",
			"description": strings.Repeat("d", 2000), "milestones": ms}
	}
	before := h.events()
	title, descr := strings.Repeat("t", escrow.MaxMilestoneTitle), strings.Repeat("é", escrow.MaxMilestoneDescription)
	h.createMilestones(seller, body(milestones(escrow.MaxMilestones, title+"t", descr))).
		expect(t, 400, fmt.Sprintf("milestones[0].title must be at most %d characters", escrow.MaxMilestoneTitle))
	h.createMilestones(seller, body(milestones(escrow.MaxMilestones, title, descr+"d"))).
		expect(t, 400, fmt.Sprintf("milestones[0].description must be at most %d characters", escrow.MaxMilestoneDescription))
	h.createMilestones(seller, body(milestones(escrow.MaxMilestones+1, title, descr))).
		expect(t, 400, fmt.Sprintf("A milestone escrow allows at most %d milestones", escrow.MaxMilestones))
	var participants []map[string]any
	for i := range escrow.MaxVaultParticipants + 1 {
		participants = append(participants, map[string]any{"customerId": fmt.Sprintf("c%d", i), "amount": 1000})
	}
	h.createVault(participants).expect(t, 400, fmt.Sprintf("A vault allows at most %d participants", escrow.MaxVaultParticipants))
	ids := make([]string, payment.MaxEscrows+1)
	for i := range ids {
		ids[i] = fmt.Sprintf("e%d", i)
	}
	h.do(req{method: "POST", path: "/v1/payment/escrow", key: h.std(), cid: seller, body: map[string]any{
		"amount": 1000, "reference": "many-escrows", "transactionType": "escrow", "gateway": "wallet",
		"escrowDetails": map[string]any{"escrowId": ids}}}).
		expect(t, 400, fmt.Sprintf("escrowDetails.escrowId must name at most %d escrows", payment.MaxEscrows))
	if after := h.events(); after != before {
		t.Fatalf("%d events stored by the refused requests", after-before)
	}

	h.createMilestones(seller, body(milestones(escrow.MaxMilestones, title, descr))).expect(t, 201, "")
	var largest int
	if err := h.pool.QueryRow(context.Background(), `SELECT max(octet_length(data::text) + octet_length(coalesce(metadata::text, ''))) FROM es_events`).Scan(&largest); err != nil {
		t.Fatal(err)
	}
	if largest > domain.MaxEventBytes {
		t.Fatalf("an event of %d bytes was stored", largest)
	}
}

// TestReturnURLsAreBounded: checkout return URLs are stored with the
// session: at most 2,048 characters each.
func TestReturnURLsAreBounded(t *testing.T) {
	f := newCheckoutFixtureOn(t, newHarness(t), 20000)
	h := f.h
	long := "https://shop.example/" + strings.Repeat("a", domain.MaxURL)
	for _, field := range []string{"successUrl", "cancelUrl"} {
		h.do(req{method: "POST", path: "/v1/checkout/sessions", key: h.std(),
			body: map[string]any{"paymentToken": f.token, "customerId": f.buyer, field: long}}).
			expect(t, 400, field+" must be at most 2048 characters")
	}
}

// TestReservedReferencePrefixes: a client may not choose a reference in a
// prefix the service's own references use (a checkout's payment, its
// top-up, a transfer's receiving side, settlement records): it could take
// the place of the service's own and block a checkout session. Nothing of
// a refused request is stored.
func TestReservedReferencePrefixes(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "seller@example.com", "08030000001")
	buyer := h.funded("buyer@example.com", "08030000002", 5000)
	e := h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "Phone", "whoPays": "buyer"}, 0).expect(t, 201, "").obj()
	before := h.events()
	for _, ref := range []string{"checkout_" + e["id"].(string), "Checkout_x", "TOPUP-1", "topup-x", "WT-" + buyer, "ESC-1-fee"} {
		h.intent(buyer, map[string]any{"reference": ref, "amount": 100, "transactionType": "deposit"}).
			expect(t, 400, "Reference prefix is reserved")
		h.pay(buyer, ref, 1025, e["id"]).expect(t, 400, "Reference prefix is reserved")
	}
	if after := h.events(); after != before {
		t.Fatalf("%d events stored by refused requests", after-before)
	}
	h.pay(buyer, "my-checkout_1", 1025, e["id"]).expect(t, 200, "Payment successful")
}

// TestTotalQuantityIsBounded: a listing has 1 to 10,000 units (each sold
// unit is an escrow of its own).
func TestTotalQuantityIsBounded(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "seller@example.com", "08030000001")
	const msg = "totalQuantity must be an integer between 1 and 10000"
	fields := func(q string) map[string]string {
		return map[string]string{"amount": "1000", "purpose": "Phone", "whoPays": "buyer", "totalQuantity": q}
	}
	for _, q := range []string{"0", "10001", "9223372036854775807", "9223372036854775808"} {
		h.createEscrow(seller, fields(q), 0).expect(t, 400, msg)
	}
	e := h.createEscrow(seller, fields("10000"), 0).expect(t, 201, "").obj()
	h.do(req{method: "PUT", path: "/v1/escrow/edit/" + e["paymentToken"].(string), key: h.std(), cid: seller,
		body: map[string]any{"totalQuantity": 10001}}).expect(t, 400, msg)
}

// TestFormTokenFromTheBodyOnly: the checkout page's anti-forgery token is
// read from the form's body; the same token in the query string is a
// forged form.
func TestFormTokenFromTheBodyOnly(t *testing.T) {
	f := newCheckoutFixtureOn(t, newHarness(t), 20000)
	f.open(t, nil)
	form := f.form(t)
	res, err := http.Post(f.h.srv.URL+"/checkout/"+f.sessionID+"/pay?"+form.Encode(), "application/x-www-form-urlencoded", strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("token in the query string: %d, want 403", res.StatusCode)
	}
	if st := f.escrowStatus(t); st != "PENDING" {
		t.Fatalf("escrow %s after a query-string token", st)
	}
	if p := f.post(t, "pay", form); p.status != http.StatusOK && p.status != http.StatusSeeOther {
		t.Fatalf("the page's own form: %d %s", p.status, p.body)
	}
}

// TestDisputeShownToItsPartiesOnly: a dispute's messages and evidence are
// shown to the escrow's buyer, its seller and the merchant; another
// customer of the merchant who looks the escrow up sees dispute: null.
func TestDisputeShownToItsPartiesOnly(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "seller@example.com", "08030000001")
	buyer := h.funded("ada@example.com", "08030000002", 20000)
	other := h.createCustomer(h.sa(), "other@example.com", "08030000003")
	_, token := h.disputedEscrow(seller, buyer, "buyer", 0, nil, 10250)
	for who, cid := range map[string]string{"buyer": buyer, "seller": seller, "merchant": ""} {
		e := h.do(req{path: "/v1/escrow/verify/" + token, key: h.std(), cid: cid}).expect(t, 200, "").obj()
		if d, _ := e["dispute"].([]any); len(d) != 1 {
			t.Errorf("%s sees dispute %v", who, e["dispute"])
		}
	}
	r := h.do(req{path: "/v1/escrow/verify/" + token, key: h.std(), cid: other}).expect(t, 200, "")
	if d, ok := r.obj()["dispute"]; !ok || d != nil {
		t.Fatalf("another customer sees dispute %v", d)
	}
	if strings.Contains(string(r.Raw), "The phone never arrived") {
		t.Fatalf("the dispute's message reached another customer: %s", r.Raw)
	}
}

// TestTestDepositsAreBounded: a deposit on the built-in test gateway, which
// confirms every deposit with no money behind it, is at most 100,000;
// above it the intent is refused when it is staged and nothing is stored.
func TestTestDepositsAreBounded(t *testing.T) {
	h := newHarness(t)
	cid := h.createCustomer(h.sa(), "d@example.com", "08030000001")
	before := h.events()
	h.intent(cid, map[string]any{"reference": "big-1", "amount": "100000.01", "transactionType": "deposit"}).
		expect(t, 400, "A test deposit may be at most 100000")
	if after := h.events(); after != before {
		t.Fatalf("%d events stored by a refused deposit", after-before)
	}
	h.intent(cid, map[string]any{"reference": "max-1", "amount": 100000, "transactionType": "deposit"}).expect(t, 201, "")
	h.verify(cid, "max-1").expect(t, 200, "")
	h.expectWallet(cid, 100000, 0)
}

// TestTestDepositsAreBoundedADay: the built-in test gateway's deposits
// credit a customer at most 1,000,000 a day: the deposit that would pass it
// is refused at verify, 400, and moves nothing; it stays staged.
func TestTestDepositsAreBoundedADay(t *testing.T) {
	h := newHarness(t)
	cid := h.createCustomer(h.sa(), "day@example.com", "08030000002")
	for i := range 10 {
		ref, amount := fmt.Sprintf("day-%d", i), 100000
		if i == 9 {
			amount = 99950
		}
		h.intent(cid, map[string]any{"reference": ref, "amount": amount, "transactionType": "deposit"}).expect(t, 201, "")
		h.verify(cid, ref).expect(t, 200, "")
	}
	h.intent(cid, map[string]any{"reference": "day-over", "amount": 100, "transactionType": "deposit"}).expect(t, 201, "")
	h.verify(cid, "day-over").expect(t, 400, "Test deposits are limited to 1000000 a day")
	h.expectWallet(cid, 999950, 0)
}
