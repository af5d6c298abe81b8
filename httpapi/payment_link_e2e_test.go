package httpapi

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/internal/app"
)

// linkClient is a buyer's browser on a payment link: it keeps cookies and
// does not follow redirects (the test reads where it is sent).
type linkClient struct {
	t    *testing.T
	f    *checkoutFixture
	http *http.Client
}

func newLinkClient(t *testing.T, f *checkoutFixture) *linkClient {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &linkClient{t: t, f: f, http: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (c *linkClient) do(method, path string, form url.Values) page {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r, err := http.NewRequest(method, c.f.h.srv.URL+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	res, err := c.http.Do(r)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return page{res.StatusCode, res.Header, string(b)}
}

var linkToken = regexp.MustCompile(`name="token" value="([^"]+)"`)

// details reads the link page and submits details on its form; it returns
// the answer.
func (c *linkClient) details(first, last, email, phone string) page {
	c.t.Helper()
	p := c.do("GET", "/escrow/"+c.f.token, nil)
	m := linkToken.FindStringSubmatch(p.body)
	if p.status != 200 || m == nil {
		c.t.Fatalf("link page %d without a form: %s", p.status, p.body)
	}
	return c.do("POST", "/escrow/"+c.f.token, url.Values{"token": {m[1]}, "firstname": {first}, "lastname": {last},
		"email": {email}, "phone": {phone}})
}

// sessionOf is the checkout session a link answer sent the buyer to.
func (c *linkClient) sessionOf(p page) string {
	c.t.Helper()
	loc := p.header.Get("Location")
	if p.status != http.StatusSeeOther || !strings.HasPrefix(loc, "/checkout/cs_") {
		c.t.Fatalf("details answered %d, Location %q: %s", p.status, loc, p.body)
	}
	return strings.TrimPrefix(loc, "/checkout/")
}

// TestPaymentLinkPage: GET /escrow/{paymentToken} shows the escrow's terms
// without a key, with the checkout page's headers and a form whose token
// is also in a cookie; a form without both is refused; an unknown token
// is 404.
func TestPaymentLinkPage(t *testing.T) {
	f := newCheckoutFixture(t, 0)
	c := newLinkClient(t, f)
	p := c.do("GET", "/escrow/"+f.token, nil)
	if p.status != 200 {
		t.Fatalf("page %d: %s", p.status, p.body)
	}
	for _, want := range []string{"Blue bicycle", "A used bicycle, 21 gears", "₦10,750.00", "Ada Obi", `name="email"`, "within <strong>3 days</strong>"} {
		if !strings.Contains(p.body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if csp := p.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "form-action 'self'") {
		t.Errorf("CSP %q", csp)
	}
	if cc := p.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q", cc)
	}
	cookie := p.header.Get("Set-Cookie")
	if !strings.Contains(cookie, linkCookie+"=") || !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") {
		t.Errorf("form cookie %q", cookie)
	}
	token := linkToken.FindStringSubmatch(p.body)[1]
	fields := url.Values{"firstname": {"Ọ̀lá"}, "lastname": {"Adébáyọ̀"}, "email": {"ola@x.com"}, "phone": {"08035559001"}}

	// Without the cookie (another site's form), or with another token.
	bare := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	withToken := url.Values{"token": {token}}
	for k, v := range fields {
		withToken[k] = v
	}
	res, err := bare.PostForm(f.h.srv.URL+"/escrow/"+f.token, withToken)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("a form without the cookie answered %d", res.StatusCode)
	}
	wrong := url.Values{"token": {"not-the-token"}}
	for k, v := range fields {
		wrong[k] = v
	}
	if p := c.do("POST", "/escrow/"+f.token, wrong); p.status != http.StatusForbidden {
		t.Fatalf("a form with another token answered %d", p.status)
	}
	f.h.do(req{path: "/v1/customers?email=ola@x.com", key: f.h.std()}).expect(t, 400, "No customer found with the provided email")

	// Unknown and malformed tokens.
	for _, tok := range []string{"PY_doesnotexist000000000000", "%3Cscript%3E"} {
		if p := c.do("GET", "/escrow/"+tok, nil); p.status != 404 || !strings.Contains(p.body, "not found") {
			t.Errorf("%s: %d %s", tok, p.status, p.body)
		}
	}
}

// TestPaymentLinkNewBuyerPaysByDeposit: a buyer the merchant does not
// know becomes its customer as typed (names with marks kept), and pays on
// the session the link opened, by a deposit made for it.
func TestPaymentLinkNewBuyerPaysByDeposit(t *testing.T) {
	f := newCheckoutFixture(t, 0)
	c := newLinkClient(t, f)
	f.sessionID = c.sessionOf(c.details("Ọ̀lá", "Adébáyọ̀", "Ola@X.com", "08035559001"))
	found := f.h.do(req{path: "/v1/customers?email=ola@x.com", key: f.h.std()}).expect(t, 200, "").obj()
	rows, _ := found["data"].([]any)
	if len(rows) != 1 {
		t.Fatalf("customers with the typed email: %v", found)
	}
	cust := rows[0].(map[string]any)
	if cust["firstname"] != "Ọ̀lá" || cust["lastname"] != "Adébáyọ̀" || cust["phone"] != "08035559001" {
		t.Fatalf("customer created as %v", cust)
	}
	st := f.h.do(req{path: "/v1/checkout/sessions/" + f.sessionID, key: f.h.std()}).expect(t, 200, "").obj()
	if st["customerId"] != cust["customerId"] || st["paymentToken"] != f.token || st["status"] != "open" {
		t.Fatalf("session %v", st)
	}
	form := f.form(t)
	if form.Get("deposit") == "" {
		t.Fatal("the session offers no deposit")
	}
	if p := f.post(t, "topup", form); p.status != 200 || !strings.Contains(p.body, "Payment successful") {
		t.Fatalf("verify and pay: %d %s", p.status, p.body)
	}
	if s := f.escrowStatus(t); s != "ONGOING" {
		t.Fatalf("escrow %s", s)
	}
	f.h.expectWallet(cust["customerId"].(string), 0, 10250)
	f.h.assertZeroSum()
	// Paid: the link says it can no longer be paid, and offers no form.
	if p := c.do("GET", "/escrow/"+f.token, nil); p.status != http.StatusGone || strings.Contains(p.body, `name="email"`) ||
		!strings.Contains(p.body, "can no longer be paid") {
		t.Fatalf("the link of a paid escrow: %d %s", p.status, p.body)
	}
}

// TestPaymentLinkNeverSpendsAWalletItDidNotFund: whoever types an existing
// customer's email reaches a session for that customer, but the session
// shows nothing of the customer's, offers no payment from the wallet,
// refuses one posted by hand, and pays only with its own deposit: the
// wallet's balance is the same after.
func TestPaymentLinkNeverSpendsAWalletItDidNotFund(t *testing.T) {
	f := newCheckoutFixture(t, 40000)
	c := newLinkClient(t, f)
	f.sessionID = c.sessionOf(c.details("Someone", "Else", "buyer@x.com", "08035559002"))
	st := f.h.do(req{path: "/v1/checkout/sessions/" + f.sessionID, key: f.h.std()}).expect(t, 200, "").obj()
	if st["customerId"] != f.buyer {
		t.Fatalf("the session is not the existing customer's: %v", st)
	}
	p := f.get(t, "/checkout/"+f.sessionID)
	if p.status != 200 {
		t.Fatalf("session page %d", p.status)
	}
	for _, leak := range []string{"40,000", `id="wallet"`, `id="buyer"`, `id="pay"`, "from wallet"} {
		if strings.Contains(p.body, leak) {
			t.Errorf("the page shows %q", leak)
		}
	}
	form := f.form(t)
	if pay := f.post(t, "pay", form); pay.status != http.StatusForbidden || !strings.Contains(pay.body, "not from a wallet") {
		t.Fatalf("a wallet payment posted by hand: %d %s", pay.status, pay.body)
	}
	f.h.expectWallet(f.buyer, 40000, 0)
	// A deposit staged by another session of the same buyer does not
	// fund this one.
	first := f.sessionID
	f.sessionID = c.sessionOf(c.details("Someone", "Else", "buyer@x.com", "08035559002"))
	otherDeposit := f.form(t).Get("deposit")
	f.sessionID = first
	stolen := url.Values{"token": {form.Get("token")}, "total": {form.Get("total")}, "deposit": {otherDeposit}}
	if p := f.post(t, "topup", stolen); p.status != http.StatusBadRequest || !strings.Contains(p.body, "Transaction not found") {
		t.Fatalf("another session's deposit: %d %s", p.status, p.body)
	}
	f.h.expectWallet(f.buyer, 40000, 0)
	if p := f.post(t, "topup", form); p.status != 200 || !strings.Contains(p.body, "Payment successful") {
		t.Fatalf("verify and pay: %d %s", p.status, p.body)
	}
	f.h.expectWallet(f.buyer, 40000, 10250)
	f.h.assertZeroSum()
	// The name typed did not change the customer.
	got := f.h.do(req{path: "/v1/customer/get/" + f.buyer, key: f.h.std()}).expect(t, 200, "").obj()
	if got["firstname"] == "Someone" {
		t.Fatalf("the link's details overwrote the customer: %v", got)
	}
}

// TestPaymentLinkRefusals: the seller's own details, a blocked customer,
// and details the customer rules refuse each get the page again with one
// message and nothing created.
func TestPaymentLinkRefusals(t *testing.T) {
	f := newCheckoutFixture(t, 0)
	c := newLinkClient(t, f)
	if p := c.details("Ada", "Obi", "seller@x.com", "08035550001"); p.status != http.StatusForbidden ||
		!strings.Contains(p.body, app.ErrLinkBuyerRefused.Error()) {
		t.Fatalf("the seller's own details: %d %s", p.status, p.body)
	}
	f.h.do(req{method: "PUT", path: "/v1/customer/block/" + f.buyer, key: f.h.sa(), body: map[string]any{"reason": "fraud"}}).
		expect(t, 200, "Customer blocked successfully")
	if p := c.details("Ada", "Obi", "buyer@x.com", "08035550002"); p.status != http.StatusForbidden ||
		!strings.Contains(p.body, app.ErrLinkBuyerRefused.Error()) {
		t.Fatalf("a blocked customer: %d %s", p.status, p.body)
	}
	p := c.details("Ada", "Obi", "not-an-email", "08035559003")
	if p.status != 400 || !strings.Contains(p.body, `value="not-an-email"`) {
		t.Fatalf("a malformed email: %d %s", p.status, p.body)
	}
	f.h.do(req{path: "/v1/customers?phone=08035559003", key: f.h.std()}).expect(t, 400, "No customer found with the provided phone")
}
