package httpapi

import (
	"bytes"
	"fmt"
	"net/url"
	"testing"
)

// TestNamesWithMarksRoundTrip: Yoruba, Igbo and Hausa names are created,
// read, listed, looked up and updated exactly as written (in NFC, however
// the client composed them).
func TestNamesWithMarksRoundTrip(t *testing.T) {
	h := newHarness(t)
	for i, c := range []struct{ first, last, stored string }{
		{"Ọ̀lá", "Adébáyọ̀", "Ọ̀lá"},
		{"Chiamaka", "Nwánkwọ́", "Chiamaka"},
		{"Ɗanjuma", "Ƙwarƙwaro", "Ɗanjuma"},
		// Typed decomposed (o + dot below + grave): stored composed.
		{"O\u0323\u0300la\u0301", "Ọ̀ṣun-D’Souza", "Ọ̀lá"},
	} {
		email := fmt.Sprintf("n%d@example.com", i)
		r := h.do(req{method: "POST", path: "/v1/customer/create", key: h.sa(),
			body: map[string]any{"firstname": c.first, "lastname": c.last, "email": email, "phone": fmt.Sprintf("0803555%04d", i)}}).
			expect(t, 201, "Customer created successfully")
		id := r.obj()["customerId"].(string)
		if got := r.obj()["firstname"]; got != c.stored {
			t.Fatalf("created %q, answered %q", c.first, got)
		}
		// The bytes on the wire are the name itself, not \u escapes.
		got := h.do(req{path: "/v1/customer/get/" + id, key: h.std()}).expect(t, 200, "")
		if !bytes.Contains(got.Raw, []byte(`"firstname":"`+c.stored+`"`)) || got.obj()["lastname"] == nil {
			t.Fatalf("read back %s", got.Raw)
		}
		if wantLast := c.last; i < 3 && got.obj()["lastname"] != wantLast {
			t.Fatalf("lastname %q, want %q", got.obj()["lastname"], wantLast)
		}
		list := h.do(req{path: "/v1/customers?email=" + url.QueryEscape(email), key: h.std()}).expect(t, 200, "")
		if !bytes.Contains(list.Raw, []byte(c.stored)) {
			t.Fatalf("lookup %s", list.Raw)
		}
	}
	id := h.createCustomer(h.sa(), "u@example.com", "08035559999")
	h.do(req{method: "PUT", path: "/v1/customer/update/" + id, key: h.sa(),
		body: map[string]any{"firstname": "Adébáyọ̀", "lastname": "Nwánkwọ́"}}).expect(t, 200, "")
	if got := h.do(req{path: "/v1/customer/get/" + id, key: h.std()}).expect(t, 200, "").obj(); got["firstname"] != "Adébáyọ̀" || got["lastname"] != "Nwánkwọ́" {
		t.Fatalf("updated %v", got)
	}
	h.do(req{method: "POST", path: "/v1/customer/create", key: h.sa(),
		body: map[string]any{"firstname": "Ada1", "lastname": "Obi", "email": "bad@example.com", "phone": "08035558888"}}).
		expect(t, 400, "firstname must be 1-100 letters, spaces, hyphens, apostrophes or dots")
}
