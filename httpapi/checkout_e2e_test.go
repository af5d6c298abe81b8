package httpapi

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/checkout"
)

// checkoutFixture is a seller's escrow of 10,000 (buyer pays the 250 fee,
// plus a 500 additional fee: 10,750 due) and a buyer funded with funds.
type checkoutFixture struct {
	h                     *harness
	seller, buyer         string
	escrowID, token       string
	clock                 *atomic.Int64 // offset from the wall clock, ns
	sessionID, sessionURL string
}

func newCheckoutFixture(t *testing.T, funds float64) *checkoutFixture {
	t.Helper()
	// Reads wait up to 30 s for the read models: these tests share the
	// machine with browsers, and a busy projector must not fail them.
	return newCheckoutFixtureOn(t, startHarnessWith(t, harnessOptions{waitTimeout: 30 * time.Second}, nil), funds)
}

func newCheckoutFixtureOn(t *testing.T, h *harness, funds float64) *checkoutFixture {
	t.Helper()
	f := &checkoutFixture{h: h, clock: &atomic.Int64{}}
	h.svc.Engine.Now = func() time.Time { return time.Now().UTC().Add(time.Duration(f.clock.Load())) }
	f.seller = h.createCustomer(h.sa(), "seller@x.com", "08035550001")
	f.buyer = h.funded("buyer@x.com", "08035550002", funds)
	e := h.createEscrow(f.seller, map[string]string{"amount": "10000", "purpose": "Blue bicycle", "whoPays": "buyer",
		"description": "A used bicycle, 21 gears", "maxDelivery": "3", "deliveryTimeline": "days"}, 1).
		expect(t, 201, "Escrow created successfully").obj()
	f.escrowID, f.token = e["id"].(string), e["paymentToken"].(string)
	h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + f.token, key: h.sa(),
		body: map[string]any{"additionalFee": 500}}).expect(t, 200, "Additional fee updated successfully")
	return f
}

// open opens a session through the API and keeps its id and url.
func (f *checkoutFixture) open(t *testing.T, body map[string]any) map[string]any {
	t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	body["paymentToken"], body["customerId"] = f.token, f.buyer
	s := f.h.do(req{method: "POST", path: "/v1/checkout/sessions", key: f.h.std(), body: body}).
		expect(t, 201, "Checkout session created successfully").obj()
	f.sessionID, f.sessionURL = s["id"].(string), s["url"].(string)
	return s
}

// page is a raw answer of the page's routes.
type page struct {
	status int
	header http.Header
	body   string
}

func (f *checkoutFixture) get(t *testing.T, path string) page {
	t.Helper()
	res, err := http.Get(f.h.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return page{res.StatusCode, res.Header, string(b)}
}

func (f *checkoutFixture) post(t *testing.T, action string, form url.Values) page {
	t.Helper()
	res, err := http.PostForm(f.h.srv.URL+"/checkout/"+f.sessionID+"/"+action, form)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return page{res.StatusCode, res.Header, string(b)}
}

var hiddenField = regexp.MustCompile(`name="(token|total|deposit)" value="([^"]*)"`)

// form is the hidden fields of the first form on an open session's page.
func (f *checkoutFixture) form(t *testing.T) url.Values {
	t.Helper()
	p := f.get(t, "/checkout/"+f.sessionID)
	if p.status != 200 {
		t.Fatalf("page %d: %s", p.status, p.body)
	}
	out := url.Values{}
	for _, m := range hiddenField.FindAllStringSubmatch(p.body, -1) {
		if out.Get(m[1]) == "" {
			out.Set(m[1], m[2])
		}
	}
	if out.Get("token") == "" {
		t.Fatalf("no anti-forgery token on the page: %s", p.body)
	}
	return out
}

func (f *checkoutFixture) escrowStatus(t *testing.T) string {
	t.Helper()
	e := f.h.do(req{path: "/v1/escrow/verify/" + f.token, key: f.h.std()}).expect(t, 200, "").obj()
	return e["status"].(string)
}

func TestCheckoutSessionAPI(t *testing.T) {
	f := newCheckoutFixture(t, 20000)
	h := f.h
	s := f.open(t, map[string]any{"successUrl": "https://shop.example/done?x=1", "cancelUrl": "https://shop.example/cart",
		"expiresInMinutes": 30})
	id := s["id"].(string)
	if !regexp.MustCompile(`^cs_[A-Z2-7]{26}$`).MatchString(id) {
		t.Fatalf("session id %q: want cs_ and 26 base32 characters (130 random bits)", id)
	}
	if s["url"] != h.srv.URL+"/checkout/"+id || s["status"] != "open" || s["amountDue"] != 10750.0 ||
		s["paymentToken"] != f.token || s["customerId"] != f.buyer || s["successUrl"] != "https://shop.example/done?x=1" ||
		s["cancelUrl"] != "https://shop.example/cart" {
		t.Fatalf("session %v", s)
	}
	if _, ok := s["formToken"]; ok {
		t.Fatal("the API shows the page's anti-forgery token")
	}
	exp, err := time.Parse(time.RFC3339, s["expiresAt"].(string))
	if err != nil || exp.Sub(time.Now()) < 29*time.Minute || exp.Sub(time.Now()) > 31*time.Minute {
		t.Fatalf("expiresAt %v (%v)", s["expiresAt"], err)
	}
	got := h.do(req{path: "/v1/checkout/sessions/" + id, key: h.sa()}).expect(t, 200, "Checkout session fetched successfully").obj()
	if got["id"] != id || got["status"] != "open" || got["amountDue"] != 10750.0 {
		t.Fatalf("read back %v", got)
	}
	// Another merchant's key does not see it; an unknown id is 404.
	other := h.newMerchant(true)
	h.do(req{path: "/v1/checkout/sessions/" + id, key: key(other, domain.Test, "standard")}).expect(t, 404, "Checkout session not found")
	h.do(req{path: "/v1/checkout/sessions/cs_NOPE", key: h.sa()}).expect(t, 404, "Checkout session not found")

	sessions := func(body map[string]any, cid string) resp {
		return h.do(req{method: "POST", path: "/v1/checkout/sessions", key: h.std(), cid: cid, body: body})
	}
	base := func(kv ...any) map[string]any {
		m := map[string]any{"paymentToken": f.token, "customerId": f.buyer}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	sessions(base(), f.buyer).expect(t, 400, "customer-id is not allowed in request header")
	sessions(base("expiresInMinutes", 4), "").expect(t, 400, "expiresInMinutes must be an integer from 5 to 1440")
	sessions(base("expiresInMinutes", 1441), "").expect(t, 400, "expiresInMinutes must be an integer from 5 to 1440")
	sessions(base("expiresInMinutes", 0), "").expect(t, 400, "expiresInMinutes must be an integer from 5 to 1440")
	sessions(base("successUrl", "javascript:alert(1)"), "").expect(t, 400, "successUrl must be an absolute http or https URL")
	sessions(base("paymentToken", "PT_UNKNOWN"), "").expect(t, 400, "Escrow not found")
	sessions(base("paymentToken", ""), "").expect(t, 400, "paymentToken is required")
	sessions(base("customerId", "nobody"), "").expect(t, 404, "Customer not found")
	sessions(base("customerId", f.seller), "").expect(t, 400, "Seller cannot pay for own escrow")
	// A buyer without canBuy, then a blocked one, may not be sent to pay.
	h.do(req{method: "PUT", path: "/v1/customer/permissions/" + f.buyer, key: h.sa(),
		body: map[string]any{"canBuy": false}}).expect(t, 200, "")
	sessions(base(), "").expect(t, 401, "Access denied")
	h.do(req{method: "PUT", path: "/v1/customer/permissions/" + f.buyer, key: h.sa(),
		body: map[string]any{"canBuy": true}}).expect(t, 200, "")
	// Once paid, the escrow is no longer awaiting payment.
	h.pay(f.buyer, "direct-1", 10750, f.escrowID).expect(t, 200, "Payment successful")
	sessions(base(), "").expect(t, 400, "")
}

// Every answer of the page's routes, errors included, carries the
// security headers.
func TestCheckoutPageSecurityHeaders(t *testing.T) {
	f := newCheckoutFixture(t, 20000)
	f.open(t, nil)
	check := func(name string, p page, status int) {
		t.Helper()
		if p.status != status {
			t.Fatalf("%s: %d, want %d: %s", name, p.status, status, p.body)
		}
		csp := p.header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "style-src 'self'", "form-action 'self'", "frame-ancestors 'none'", "base-uri 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: CSP %q lacks %q", name, csp, want)
			}
		}
		if strings.Contains(csp, "script-src") || strings.Contains(csp, "unsafe-") {
			t.Errorf("%s: CSP %q allows scripts or unsafe sources", name, csp)
		}
		for h, want := range map[string]string{"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
			"X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"} {
			if got := p.header.Get(h); got != want {
				t.Errorf("%s: %s = %q, want %q", name, h, got, want)
			}
		}
	}
	open := f.get(t, "/checkout/"+f.sessionID)
	check("open page", open, 200)
	if ct := open.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("content type %q", ct)
	}
	for _, want := range []string{"Blue bicycle", "A used bicycle, 21 gears", "Ada Obi", "₦10,000.00", "₦250.00", "₦500.00",
		"₦10,750.00", "3 days", "Shop", `<html lang="en">`, `name="viewport"`} {
		if !strings.Contains(open.body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(open.body, "<script") || strings.Contains(open.body, "https://") {
		t.Error("page has a script or a third-party asset")
	}
	check("stylesheet", f.get(t, "/checkout/assets/checkout.css"), 200)
	check("unknown session", f.get(t, "/checkout/cs_AAAAAAAAAAAAAAAAAAAAAAAAAA"), 404)
	check("not a session id", f.get(t, "/checkout/whatever"), 404)
	check("forged form", f.post(t, "pay", url.Values{"token": {"forged"}}), 403)
}

// A form without the session's token does nothing: the token is what
// stops another site from making the buyer's browser pay or cancel.
func TestCheckoutAntiForgery(t *testing.T) {
	f := newCheckoutFixture(t, 20000)
	f.open(t, nil)
	good := f.form(t)
	for name, form := range map[string]url.Values{
		"no token":      {"total": {good.Get("total")}},
		"wrong token":   {"token": {strings.Repeat("A", len(good.Get("token")))}, "total": {good.Get("total")}},
		"other session": {"token": {"x" + good.Get("token")}, "total": {good.Get("total")}},
	} {
		for _, action := range []string{"pay", "cancel", "topup"} {
			p := f.post(t, action, form)
			if p.status != 403 || !strings.Contains(p.body, "no longer valid") {
				t.Fatalf("%s %s: %d %s", name, action, p.status, p.body)
			}
		}
	}
	f.h.expectWallet(f.buyer, 20000, 0)
	if st := f.escrowStatus(t); st != "PENDING" {
		t.Fatalf("escrow %s after forged forms", st)
	}
	// The same form with the token pays.
	p := f.post(t, "pay", good)
	if p.status != 200 || !strings.Contains(p.body, "Payment successful") {
		t.Fatalf("pay: %d %s", p.status, p.body)
	}
	f.h.expectWallet(f.buyer, 20000-10750, 10250)
}

// Expiry is decided at the moment of payment: a session that expires
// between the page and the click pays nothing.
func TestCheckoutExpiresAtPayment(t *testing.T) {
	f := newCheckoutFixture(t, 20000)
	f.open(t, map[string]any{"expiresInMinutes": 5})
	form := f.form(t)
	f.clock.Store(int64(5 * time.Minute)) // the page was open; the session expires now
	p := f.post(t, "pay", form)
	if p.status != 410 || !strings.Contains(p.body, "This checkout has expired") {
		t.Fatalf("pay after expiry: %d %s", p.status, p.body)
	}
	f.h.expectWallet(f.buyer, 20000, 0)
	if st := f.escrowStatus(t); st != "PENDING" {
		t.Fatalf("escrow %s", st)
	}
	if g := f.get(t, "/checkout/"+f.sessionID); g.status != 410 {
		t.Fatalf("page of an expired session: %d", g.status)
	}
	s := f.h.do(req{path: "/v1/checkout/sessions/" + f.sessionID, key: f.h.std()}).expect(t, 200, "").obj()
	if s["status"] != "expired" {
		t.Fatalf("session %v", s)
	}
	// The app refuses too, whoever calls it (no page in between).
	if _, err := f.h.svc.PayCheckout(t.Context(), f.sessionID, 10750_00); err != checkout.ErrExpired {
		t.Fatalf("PayCheckout after expiry: %v", err)
	}
}

// A double click or two tabs pay once; every answer is the receipt of
// the one payment.
func TestCheckoutDoubleSubmitPaysOnce(t *testing.T) {
	f := newCheckoutFixture(t, 30000)
	f.open(t, map[string]any{"successUrl": "https://shop.example/done"})
	form := f.form(t)
	var wg sync.WaitGroup
	pages := make([]page, 6)
	for i := range pages {
		wg.Add(1)
		go func() { defer wg.Done(); pages[i] = f.post(t, "pay", form) }()
	}
	wg.Wait()
	ref := "checkout_" + f.sessionID
	for i, p := range pages {
		if p.status != 200 || !strings.Contains(p.body, ref) {
			t.Fatalf("submit %d: %d %s", i, p.status, p.body)
		}
		if !strings.Contains(p.body, `href="https://shop.example/done?paymentToken=`+f.token+`&amp;reference=`+ref+`"`) {
			t.Fatalf("submit %d: no link to successUrl: %s", i, p.body)
		}
	}
	f.h.expectWallet(f.buyer, 30000-10750, 10250)
	if st := f.escrowStatus(t); st != "ONGOING" {
		t.Fatalf("escrow %s", st)
	}
	// The page now says it was paid (410), with the receipt.
	if g := f.get(t, "/checkout/"+f.sessionID); g.status != 410 || !strings.Contains(g.body, "already been paid") {
		t.Fatalf("page after payment: %d %s", g.status, g.body)
	}
	f.h.assertZeroSum()
}

func TestCheckoutCancel(t *testing.T) {
	f := newCheckoutFixture(t, 20000)
	f.open(t, map[string]any{"cancelUrl": "https://shop.example/cart"})
	form := f.form(t)
	c := f.post(t, "cancel", url.Values{"token": {form.Get("token")}})
	if c.status != 410 || !strings.Contains(c.body, "Checkout cancelled") || !strings.Contains(c.body, `href="https://shop.example/cart"`) {
		t.Fatalf("cancel: %d %s", c.status, c.body)
	}
	if p := f.post(t, "pay", form); p.status != 410 || !strings.Contains(p.body, "Checkout cancelled") {
		t.Fatalf("pay after cancel: %d %s", p.status, p.body)
	}
	f.h.expectWallet(f.buyer, 20000, 0)
	s := f.h.do(req{path: "/v1/checkout/sessions/" + f.sessionID, key: f.h.std()}).expect(t, 200, "").obj()
	if s["status"] != "cancelled" {
		t.Fatalf("session %v", s)
	}
}

// Terms changed after the page was shown: the payment is refused, as
// POST /v1/payment/escrow refuses an amount that is not the total due.
func TestCheckoutRefusesChangedTotal(t *testing.T) {
	f := newCheckoutFixture(t, 20000)
	f.open(t, nil)
	form := f.form(t)
	f.h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + f.token, key: f.h.sa(),
		body: map[string]any{"additionalFee": 900}}).expect(t, 200, "Additional fee updated successfully")
	p := f.post(t, "pay", form)
	if p.status != 400 || !strings.Contains(p.body, "Amount mismatch") || !strings.Contains(p.body, "₦11,150.00") {
		t.Fatalf("pay with the old total: %d %s", p.status, p.body)
	}
	f.h.expectWallet(f.buyer, 20000, 0)
}

// Paying on the page is PayEscrows itself: the merchant hears of it by the
// same webhooks as of a payment through the API, once each.
func TestCheckoutSendsThePaymentsWebhooks(t *testing.T) {
	h := newWebhookHarness(t)
	rc := newHookReceiver(t, h.m.SigningSecrets[domain.Test], 0)
	h.do(req{method: "PUT", path: "/v1/merchant/webhook", key: h.sa(), body: map[string]any{"url": rc.srv.URL + "/hooks"}}).
		expect(t, 200, "Webhook updated successfully")
	f := newCheckoutFixtureOn(t, h, 20000)
	f.open(t, nil)
	if p := f.post(t, "pay", f.form(t)); p.status != 200 {
		t.Fatalf("pay: %d %s", p.status, p.body)
	}
	counts := map[string]int{}
	for _, hit := range h.allWebhooks(rc) {
		switch hit.Event {
		case "escrow.ongoing":
			if hit.Data["paymentToken"] != f.token || hit.Data["buyerId"] != f.buyer {
				t.Errorf("escrow.ongoing %v", hit.Data)
			}
		case "payment.escrow.success":
			if hit.Data["reference"] != "checkout_"+f.sessionID || hit.Data["amount"] != 10750.0 {
				t.Errorf("payment.escrow.success %v", hit.Data)
			}
		}
		counts[hit.Event]++
	}
	if counts["escrow.ongoing"] != 1 || counts["payment.escrow.success"] != 1 {
		t.Fatalf("webhooks %v: want escrow.ongoing and payment.escrow.success once each", counts)
	}
}

// A buyer blocked after the session opened sees why on the page and
// cannot pay there, whether the wallet covers the total or not.
func TestCheckoutBlockedBuyer(t *testing.T) {
	f := newCheckoutFixture(t, 20000)
	f.open(t, nil)
	form := f.form(t)
	f.h.do(req{method: "PUT", path: "/v1/customer/block/" + f.buyer, key: f.h.sa(), body: map[string]any{"reason": "fraud"}}).
		expect(t, 200, "Customer blocked successfully")
	p := f.post(t, "pay", form)
	if p.status != 401 || !strings.Contains(p.body, "Your account is disabled") {
		t.Fatalf("pay of a blocked buyer: %d %s", p.status, p.body)
	}
	if st := f.escrowStatus(t); st != "PENDING" {
		t.Fatalf("escrow %s after a blocked buyer's click", st)
	}
	// Short of the total in test, the page would stage a deposit: for a
	// blocked buyer it says why instead.
	short := newCheckoutFixture(t, 1000)
	short.open(t, nil)
	short.h.do(req{method: "PUT", path: "/v1/customer/block/" + short.buyer, key: short.h.sa(), body: map[string]any{"reason": "fraud"}}).
		expect(t, 200, "Customer blocked successfully")
	g := short.get(t, "/checkout/"+short.sessionID)
	if g.status != 200 || !strings.Contains(g.body, "Your account is disabled") || strings.Contains(g.body, `id="topup"`) {
		t.Fatalf("page of a blocked buyer short of funds: %d %s", g.status, g.body)
	}
}
