package httpapi

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
)

// TestImagesByURL: a JSON create or edit names its images by https URL
// (one string or an array of up to 5); they are stored and shown as
// given, edits append, and the checkout page shows them under a CSP that
// lets the buyer's browser load them. Anything else under imageUrl is
// refused, never silently dropped.
func TestImagesByURL(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035554001")
	buyer := h.funded("b@x.com", "08035554002", 20000)
	create := func(imageURL any) resp {
		return h.do(req{method: "POST", path: "/v1/escrow/create", key: h.std(), cid: seller,
			body: map[string]any{"amount": 5000, "purpose": "Lamp", "whoPays": "buyer", "imageUrl": imageURL}})
	}
	images := func(e map[string]any) []string {
		var out []string
		for _, u := range e["imageUrl"].([]any) {
			out = append(out, u.(string))
		}
		return out
	}
	const one = "https://cdn.shop.example/lamps/brass.jpg?v=2"
	e := create(one).expect(t, 201, "Escrow created successfully").obj()
	if got := images(e); len(got) != 1 || got[0] != one {
		t.Fatalf("created with %v", got)
	}
	token := e["paymentToken"].(string)
	if got := images(h.do(req{path: "/v1/escrow/verify/" + token, key: h.std(), cid: seller}).expect(t, 200, "").obj()); len(got) != 1 || got[0] != one {
		t.Fatalf("read back %v", got)
	}
	more := []string{"https://cdn.shop.example/lamps/side.webp", "https://img.example.org/a%20b.png"}
	edited := h.do(req{method: "PUT", path: "/v1/escrow/edit/" + token, key: h.std(), cid: seller,
		body: map[string]any{"imageUrl": more}}).expect(t, 200, "Escrow updated successfully").obj()
	if got := images(edited); strings.Join(got, " ") != strings.Join(append([]string{one}, more...), " ") {
		t.Fatalf("edit appended %v", got)
	}
	rows, _ := h.escrowPage("/v1/escrow/feeds?paymentToken="+token, "", "")
	if len(rows) != 1 || len(images(rows[0])) != 3 {
		t.Fatalf("feeds %v", rows)
	}
	arr := create([]string{"https://a.example/1.png", "https://a.example/2.png", "https://a.example/3.png",
		"https://a.example/4.png", "https://a.example/5.png"}).expect(t, 201, "").obj()
	if len(images(arr)) != 5 {
		t.Fatalf("five %v", arr)
	}
	if got := images(create([]string{}).expect(t, 201, "").obj()); len(got) != 0 {
		t.Fatalf("no images %v", got)
	}

	const shape = "imageUrl must be an https URL or an array of at most 5 https URLs"
	for _, bad := range []struct {
		name string
		v    any
		msg  string
	}{
		{"http", "http://cdn.example/x.png", shape},
		{"not a URL", "lamp.png", shape},
		{"empty", "", shape},
		{"credentials", "https://user:pw@cdn.example/x.png", shape},
		{"space", "https://cdn.example/a b.png", shape},
		{"javascript", "javascript:alert(1)", shape},
		{"no host", "https:///x.png", shape},
		{"too long", "https://cdn.example/" + strings.Repeat("a", 2048), shape},
		{"six", []string{"https://a.example/1", "https://a.example/2", "https://a.example/3", "https://a.example/4",
			"https://a.example/5", "https://a.example/6"}, shape},
		{"an object", map[string]any{"url": one}, shape},
		{"a number", 5, shape},
		{"one bad of two", []string{one, "ftp://a.example/x"}, shape},
	} {
		if r := create(bad.v); r.Status != 400 || r.Message != bad.msg {
			t.Errorf("%s: %d %s", bad.name, r.Status, r.Raw)
		}
	}
	// Appending past the 20 an escrow holds is refused, as for files: 3
	// so far, 17 more, then one too many.
	h.do(req{method: "PUT", path: "/v1/escrow/edit/" + token, key: h.std(), cid: seller,
		body: map[string]any{"imageUrl": []string{"https://b.example/a", "https://b.example/b"}}}).expect(t, 200, "")
	for i := 0; i < 3; i++ {
		h.do(req{method: "PUT", path: "/v1/escrow/edit/" + token, key: h.std(), cid: seller,
			body: map[string]any{"imageUrl": []string{"https://b.example/1", "https://b.example/2", "https://b.example/3",
				"https://b.example/4", "https://b.example/5"}}}).expect(t, 200, "")
	}
	h.do(req{method: "PUT", path: "/v1/escrow/edit/" + token, key: h.std(), cid: seller,
		body: map[string]any{"imageUrl": "https://b.example/21"}}).expect(t, 400, "imageUrl accepts at most 20 images in total")

	// The buyer's page shows the linked images, and its CSP lets them load.
	s := h.do(req{method: "POST", path: "/v1/checkout/sessions", key: h.std(),
		body: map[string]any{"paymentToken": token, "customerId": buyer}}).expect(t, 201, "").obj()
	res, err := http.Get(s["url"].(string))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(res.Body)
	csp := res.Header.Get("Content-Security-Policy")
	if res.StatusCode != 200 || !strings.Contains(body.String(), `<img src="https://cdn.shop.example/lamps/brass.jpg?v=2"`) ||
		!strings.Contains(csp, "img-src 'self' ") || !strings.Contains(csp, " https:;") || !strings.Contains(csp, "default-src 'none'") {
		t.Fatalf("checkout page %d, CSP %q:\n%s", res.StatusCode, csp, body.String())
	}
}

// TestImagesByURLRefuseTheServicesOwnFiles: a link to a file this service
// stores (under ESCROW_PUBLIC_URL/files/) is refused: stored files belong
// to the escrow that uploaded them.
func TestImagesByURLRefuseTheServicesOwnFiles(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.PublicURL = "https://pay.shop.test" })
	seller := h.createCustomer(h.sa(), "s@x.com", "08035554001")
	for _, u := range []string{"https://pay.shop.test/files/" + strings.Repeat("a", 32) + ".png", "https://pay.shop.test/files/x"} {
		h.do(req{method: "POST", path: "/v1/escrow/create", key: h.std(), cid: seller,
			body: map[string]any{"amount": 5000, "purpose": "Lamp", "whoPays": "buyer", "imageUrl": u}}).
			expect(t, 400, "imageUrl must not name a file stored by this service; send the image itself instead")
	}
	h.do(req{method: "POST", path: "/v1/escrow/create", key: h.std(), cid: seller,
		body: map[string]any{"amount": 5000, "purpose": "Lamp", "whoPays": "buyer", "imageUrl": "https://pay.shop.test/img/lamp.png"}}).
		expect(t, 201, "")
}
