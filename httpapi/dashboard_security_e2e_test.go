package httpapi

import (
	"context"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/internal/dashauth"
)

// TestDashboardForgedForms: a POST without the session's anti-forgery
// token, or with another session's, is 403 and changes nothing; so is a
// login form without its cookie-bound token.
func TestDashboardForgedForms(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035557001")
	victim := h.dashUser("owner@shop.example", dashauth.Owner)
	other := h.dashUser("other@shop.example", dashauth.Owner)
	other.page("/dashboard/test/customers")
	otherToken := other.token()
	victim.page("/dashboard/test/customers")
	for name, token := range map[string]string{"no token": "", "another session's token": otherToken, "a made-up token": "AAAA"} {
		form := url.Values{"reason": {"forged"}}
		if token != "" {
			form.Set("csrf", token)
		}
		r := victim.do(http.MethodPost, "/dashboard/test/customers/"+seller+"/block", form)
		if r.Status != 403 || !strings.Contains(r.Body, "This form is no longer valid") {
			t.Fatalf("%s: %d %s", name, r.Status, r.Body)
		}
		// The token in the query string is not read either.
		r = victim.do(http.MethodPost, "/dashboard/test/customers/"+seller+"/block?csrf="+url.QueryEscape(victim.token()), form)
		if r.Status != 403 {
			t.Fatalf("%s, token in the query: %d", name, r.Status)
		}
		victim.page("/dashboard/test/customers")
	}
	if st := h.customerStatus(seller); st != "active" {
		t.Fatalf("a forged form blocked the customer: %s", st)
	}
	keys := len(h.merchantState().Keys)
	expectStatus(t, victim.do(http.MethodPost, "/dashboard/test/keys", url.Values{"role": {"super_admin"}, "csrf": {otherToken}}), 403, "forged key")
	if len(h.merchantState().Keys) != keys {
		t.Fatal("a forged form issued a key")
	}
	// The session's own token works.
	victim.page("/dashboard/test/customers")
	expectStatus(t, victim.post("/dashboard/test/customers/"+seller+"/block", url.Values{"reason": {"real"}}), 303, "the real form")
	// Logging in needs the login page's token, bound to its cookie.
	fresh := h.dashBrowser()
	r := fresh.do(http.MethodPost, "/dashboard/login", url.Values{"email": {"owner@shop.example"}, "password": {dashPassword}})
	if r.Status != 403 || fresh.cookie() != "" {
		t.Fatalf("a login without the form's token: %d, session %q", r.Status, fresh.cookie())
	}
}

// TestDashboardSessionFixation: a session id chosen before login (by an
// attacker who planted it) is never the one the login makes; the id of
// the password step stops working at the code step.
func TestDashboardSessionFixation(t *testing.T) {
	h := newHarness(t)
	first := h.dashUser("ada@shop.example", dashauth.Owner)
	c := h.dashBrowser()
	c.secret = first.secret // the user's authenticator
	u, _ := url.Parse(h.srv.URL + "/dashboard/")
	planted := "PLANTEDBYANATTACKERPLANTEDBYANATTACKER"
	c.client.Jar.SetCookies(u, []*http.Cookie{{Name: dashCookie, Value: planted, Path: "/dashboard"}})
	expectStatus(t, c.get("/dashboard/test"), 303, "a planted id is no session")
	c.page("/dashboard/login")
	expectStatus(t, c.post("/dashboard/login", url.Values{"email": {"ada@shop.example"}, "password": {dashPassword}}), 303, "password")
	passwordStage := c.cookie()
	if passwordStage == planted || passwordStage == "" {
		t.Fatalf("the login kept the planted id: %q", passwordStage)
	}
	c.page("/dashboard/code")
	c.enterCode(time.Now().Add(30 * time.Second)) // the next step: the first login used this one
	active := c.cookie()
	if active == passwordStage || active == planted {
		t.Fatal("the code step kept the session id")
	}
	c.page("/dashboard/test")
	// The planted and the password-stage ids reach nothing.
	for _, id := range []string{planted, passwordStage} {
		a := h.dashBrowser()
		a.client.Jar.SetCookies(u, []*http.Cookie{{Name: dashCookie, Value: id, Path: "/dashboard"}})
		if r := a.get("/dashboard/test"); r.Status != 303 || r.Location != "/dashboard/login" {
			t.Fatalf("id %q: %d %q", id, r.Status, r.Location)
		}
	}
	// The cookie's attributes.
	c2 := h.dashBrowser()
	c2.page("/dashboard/login")
	r := c2.post("/dashboard/login", url.Values{"email": {"ada@shop.example"}, "password": {dashPassword}})
	set := strings.Join(r.Header.Values("Set-Cookie"), "\n")
	if !strings.Contains(set, dashCookie+"=") || !strings.Contains(set, "HttpOnly") || !strings.Contains(set, "SameSite=Strict") ||
		!strings.Contains(set, "Path=/dashboard") {
		t.Fatalf("session cookie %q", set)
	}
	// Logging out ends the session on the server, not only in the browser.
	c.page("/dashboard/test")
	expectStatus(t, c.post("/dashboard/logout", nil), 303, "logout")
	a := h.dashBrowser()
	a.client.Jar.SetCookies(u, []*http.Cookie{{Name: dashCookie, Value: active, Path: "/dashboard"}})
	expectStatus(t, a.get("/dashboard/test"), 303, "a logged-out id")
}

// TestDashboardOtherMerchantsData: a user of one merchant reaches nothing
// of another's by id, and each environment's pages only their own.
func TestDashboardOtherMerchantsData(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035557001")
	buyer := h.funded("b@x.com", "08035557002", 20000)
	id, token := h.disputedEscrow(seller, buyer, "buyer", 0, nil, 10250)
	other := h.newMerchant(true)
	intruder := h.dashUserOf(other.MerchantID, "intruder@other.example", dashauth.Owner)
	for _, path := range []string{"/dashboard/test/escrows/" + id} {
		expectStatus(t, intruder.get(path), 404, path)
	}
	for _, find := range []string{id, token} {
		if body := intruder.page("/dashboard/test/escrows?find=" + find); !strings.Contains(body, "No escrow of this environment") {
			t.Fatalf("find %s: %s", find, body)
		}
	}
	for _, path := range []string{"/dashboard/test/customers", "/dashboard/test/escrows", "/dashboard/test/disputes", "/dashboard/test"} {
		if body := intruder.page(path); strings.Contains(body, seller) || strings.Contains(body, id) || strings.Contains(body, "s@x.com") {
			t.Fatalf("%s shows the other merchant's data", path)
		}
	}
	intruder.page("/dashboard/test")
	expectStatus(t, intruder.post("/dashboard/test/escrows/"+id+"/resolve", url.Values{"status": {"REFUNDED"}}), 404, "resolve another's")
	intruder.page("/dashboard/test")
	// As the API answers a customer id of no customer of the merchant.
	if r := expectStatus(t, intruder.post("/dashboard/test/customers/"+seller+"/block", nil), 400, "block another's"); !strings.Contains(r.Body, "Customer not found") {
		t.Fatalf("block another's: %s", r.Body)
	}
	intruder.page("/dashboard/test")
	expectStatus(t, intruder.post("/dashboard/test/keys/"+h.m.Keys[0].KeyID+"/revoke", nil), 404, "revoke another's key")
	// The owner's own live key is not revoked from the test pages.
	owner := h.dashUser("owner@shop.example", dashauth.Owner)
	var liveKey string
	for _, k := range h.m.Keys {
		if k.Environment == "live" {
			liveKey = k.KeyID
		}
	}
	owner.page("/dashboard/test/keys")
	expectStatus(t, owner.post("/dashboard/test/keys/"+liveKey+"/revoke", nil), 404, "a live key from the test pages")
	if h.merchantState().Keys[liveKey].Revoked || h.merchantState().Keys[h.m.Keys[0].KeyID].Revoked {
		t.Fatal("a key was revoked from outside its pages")
	}
	if st := h.customerStatus(seller); st != "active" {
		t.Fatalf("another merchant's user blocked the customer: %s", st)
	}
	if st := h.escrowStatus(id); st != "DISPUTED" {
		t.Fatalf("another merchant's user resolved the dispute: %s", st)
	}
}

// xss is a string that would run script if shown unescaped anywhere on a
// page: in text, in an attribute, in a URL.
const xss = `"'><script>alert(1)</script><img src=x onerror=alert(2)>`

// TestDashboardEscapesEverySuppliedString: every merchant- or
// customer-supplied string a page shows (names, purpose, description,
// dispute messages, the block reason, the resolution note, the user's
// email, the search terms) is escaped. Names may hold only letters,
// spaces, hyphens, apostrophes and dots, so they carry the apostrophe;
// emails and phones are validated to their formats.
func TestDashboardEscapesEverySuppliedString(t *testing.T) {
	h := newHarness(t)
	cust := func(email, phone string) string {
		r := h.do(req{method: "POST", path: "/v1/customer/create", key: h.sa(),
			body: map[string]any{"firstname": "D'Arcy", "lastname": "O'Obi", "email": email, "phone": phone}})
		r.expect(t, 201, "Customer created successfully")
		return r.obj()["customerId"].(string)
	}
	seller := cust("s@x.com", "08035557001")
	buyer := cust("b@x.com", "08035557002")
	h.topUp(buyer, 20000).expect(t, 200, "Wallet topped up successfully")
	e := h.createEscrow(seller, map[string]string{"amount": "10000", "purpose": "Phone" + xss, "description": "Desc" + xss,
		"whoPays": "buyer", "maxDelivery": "1", "deliveryTimeline": "days"}, 0).expect(t, 201, "").obj()
	id, token := e["id"].(string), e["paymentToken"].(string)
	h.pay(buyer, "pay-"+id, 10250, id).expect(t, 200, "Payment successful")
	h.submitDispute(token, buyer, "Never came"+xss).expect(t, 200, "Escrow dispute submitted successfully")
	other := h.createCustomer(h.sa(), "o@x.com", "08035557003")

	c := h.dashUser(`"><script>alert(3)</script>@shop.example`, dashauth.Owner)
	c.page("/dashboard/test/customers")
	expectStatus(t, c.post("/dashboard/test/customers/"+other+"/block", url.Values{"reason": {"Reason" + xss}}), 303, "block")
	pages := []string{"/dashboard/test", "/dashboard/test/escrows", "/dashboard/test/escrows/" + id, "/dashboard/test/disputes",
		"/dashboard/test/customers", "/dashboard/users", "/dashboard/test/escrows?find=" + url.QueryEscape(xss),
		"/dashboard/test/escrows?customer=" + url.QueryEscape(xss) + "&status=" + url.QueryEscape(xss), "/dashboard/test?done=" + url.QueryEscape(xss)}
	for _, p := range pages {
		body := c.page(p)
		for _, raw := range []string{"<script>", "<img src=x", `"'>`} {
			if strings.Contains(body, raw) {
				t.Errorf("%s shows %q unescaped", p, raw)
			}
		}
	}
	// The strings are there, escaped: the test looked where they are shown.
	for p, want := range map[string][]string{
		"/dashboard/test/escrows/" + id: {"Phone&#34;&#39;&gt;&lt;script&gt;", "Desc&#34;", "Never came&#34;"},
		"/dashboard/test/customers":     {"D&#39;Arcy O&#39;Obi", "Reason&#34;&#39;&gt;&lt;script&gt;"},
		"/dashboard/users":              {"&#34;&gt;&lt;script&gt;alert(3)&lt;/script&gt;@shop.example"},
	} {
		body := c.page(p)
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("%s does not show %q", p, w)
			}
		}
	}
	// A note the resolution records, and the page after a refused form
	// that shows the typed values again.
	c.page("/dashboard/test/escrows/" + id)
	r := c.post("/dashboard/test/escrows/"+id+"/resolve", url.Values{"status": {"SPLIT"}, "sellerAmount": {xss}, "buyerAmount": {"1"},
		"resolution": {"Note" + xss}})
	if r.Status != 400 || strings.Contains(r.Body, "<script>") || !strings.Contains(r.Body, "Note&#34;") {
		t.Fatalf("a refused resolution: %d %s", r.Status, r.Body)
	}
}

// TestDashboardTOTPSecretIsSealed: once a user has enrolled over HTTP,
// their row holds no TOTP secret (as text or as bytes), and their
// authenticator's code still logs them in.
func TestDashboardTOTPSecretIsSealed(t *testing.T) {
	h := newHarness(t)
	c := h.dashUser("ada@shop.example", dashauth.Support)
	var raw string
	if err := h.pool.QueryRow(context.Background(), `SELECT row_to_json(u)::text FROM dashboard_users u WHERE merchant_id = $1`,
		h.m.MerchantID).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.ToUpper(raw), c.secret) || strings.Contains(strings.ToLower(raw), hex.EncodeToString([]byte(c.secret))) {
		t.Fatalf("the user's row holds their TOTP secret: %s", raw)
	}
	again := h.dashBrowser()
	again.page("/dashboard/login")
	if r := expectStatus(t, again.post("/dashboard/login", url.Values{"email": {c.email}, "password": {dashPassword}}), 303, "login"); r.Location != "/dashboard/code" {
		t.Fatalf("login sends to %q", r.Location)
	}
	again.page("/dashboard/code")
	again.secret = c.secret
	again.enterCode(time.Now().Add(30 * time.Second)) // the enrolment used this step's code
	again.page("/dashboard/test")
}
