package httpapi

import (
	"context"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/domain"
)

// TestEventsAreBounded: an event that every field at its cap would take
// past domain.MaxEventBytes (fifty milestones with the longest titles and
// descriptions) is refused whole, 413, and nothing of it is stored; the
// same escrow with short descriptions is created.
func TestEventsAreBounded(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "seller@example.com", "08030000001")
	milestones := func(title, descr string) []map[string]any {
		var ms []map[string]any
		for range 50 {
			ms = append(ms, map[string]any{"title": title, "description": descr, "amount": 200})
		}
		return ms
	}
	body := map[string]any{"amount": 10000, "purpose": "Website", "whoPays": "buyer",
		"milestones": milestones(strings.Repeat("t", 200), strings.Repeat("d", 2000))}
	before := h.events()
	h.createMilestones(seller, body).expect(t, 413, domain.ErrEventTooLarge.Message)
	if after := h.events(); after != before {
		t.Fatalf("%d events stored by the refused request", after-before)
	}
	body["milestones"] = milestones("Step", "short")
	h.createMilestones(seller, body).expect(t, 201, "")
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
