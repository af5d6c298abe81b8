package httpapi

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/internal/dashauth"
)

// dashPassword is every test user's password.
const dashPassword = "a long enough passphrase"

// dashClient is one browser of the dashboard over plain HTTP: its own
// cookie jar, redirects not followed (the tests look at them).
type dashClient struct {
	t      *testing.T
	h      *harness
	client *http.Client
	email  string
	secret string // the user's TOTP secret, once set up
	// last is the body of the last page fetched.
	last string
}

func (h *harness) dashBrowser() *dashClient {
	h.t.Helper()
	jar, _ := cookiejar.New(nil)
	return &dashClient{t: h.t, h: h, client: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

type dashResp struct {
	Status   int
	Body     string
	Location string
	Header   http.Header
}

func (c *dashClient) do(method, path string, form url.Values) dashResp {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r, err := http.NewRequest(method, c.h.srv.URL+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	res, err := c.client.Do(r)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	c.last = string(raw)
	return dashResp{Status: res.StatusCode, Body: string(raw), Location: res.Header.Get("Location"), Header: res.Header}
}

func (c *dashClient) get(path string) dashResp { return c.do(http.MethodGet, path, nil) }

// post sends form with the anti-forgery token of the last page fetched.
func (c *dashClient) post(path string, form url.Values) dashResp {
	c.t.Helper()
	form = cloneForm(form)
	if form.Get("csrf") == "" {
		form.Set("csrf", c.token())
	}
	return c.do(http.MethodPost, path, form)
}

func cloneForm(f url.Values) url.Values {
	out := url.Values{}
	for k, v := range f {
		out[k] = append([]string(nil), v...)
	}
	return out
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// token is the anti-forgery token of the last page fetched.
func (c *dashClient) token() string {
	c.t.Helper()
	m := csrfField.FindStringSubmatch(c.last)
	if m == nil {
		c.t.Fatalf("no anti-forgery token on the page: %s", c.last)
	}
	return html.UnescapeString(m[1])
}

func (c *dashClient) cookie() string {
	u, _ := url.Parse(c.h.srv.URL + "/dashboard/")
	for _, ck := range c.client.Jar.Cookies(u) {
		if ck.Name == dashCookie {
			return ck.Value
		}
	}
	return ""
}

func expectStatus(t *testing.T, r dashResp, status int, where string) dashResp {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: status %d, want %d; location %q body %s", where, r.Status, status, r.Location, r.Body)
	}
	return r
}

var totpSecretField = regexp.MustCompile(`id="totp-secret" readonly value="([A-Z2-7]+)"`)

// newDashUser creates a user of merchantID with role and returns their
// setup link's token.
func (h *harness) newDashUser(merchantID, email string, role dashauth.Role) string {
	h.t.Helper()
	_, token, err := h.api.users.CreateUser(context.Background(), merchantID, email, role, "operator", time.Now())
	if err != nil {
		h.t.Fatal(err)
	}
	return token
}

// dashUser creates a user of the harness merchant, and logs a new browser
// in through the setup link, the password and a TOTP code.
func (h *harness) dashUser(email string, role dashauth.Role) *dashClient {
	h.t.Helper()
	return h.dashUserOf(h.m.MerchantID, email, role)
}

func (h *harness) dashUserOf(merchantID, email string, role dashauth.Role) *dashClient {
	h.t.Helper()
	token := h.newDashUser(merchantID, email, role)
	c := h.dashBrowser()
	c.email = email
	expectStatus(h.t, c.get("/dashboard/setup/"+token), 200, "setup page")
	r := expectStatus(h.t, c.post("/dashboard/setup/"+token, url.Values{"password": {dashPassword}, "confirm": {dashPassword}}), 303, "setup")
	if r.Location != "/dashboard/code" {
		h.t.Fatalf("setup sends to %q", r.Location)
	}
	page := expectStatus(h.t, c.get("/dashboard/code"), 200, "code page")
	m := totpSecretField.FindStringSubmatch(page.Body)
	if m == nil {
		h.t.Fatalf("no TOTP secret on the first login's code page: %s", page.Body)
	}
	c.secret = m[1]
	c.enterCode(time.Now())
	return c
}

// enterCode sends the TOTP code of at on the code page.
func (c *dashClient) enterCode(at time.Time) {
	c.t.Helper()
	code, err := dashauth.TOTPCode(c.secret, at)
	if err != nil {
		c.t.Fatal(err)
	}
	r := expectStatus(c.t, c.post("/dashboard/code", url.Values{"code": {code}}), 303, "code")
	if r.Location != "/dashboard/test" {
		c.t.Fatalf("the code sends to %q", r.Location)
	}
}

// page fetches path and fails unless it answers 200.
func (c *dashClient) page(path string) string {
	c.t.Helper()
	return expectStatus(c.t, c.get(path), 200, path).Body
}

// hookedDispute points the harness merchant's test webhooks at a new
// receiver, then puts an escrow of 10,000 (the fee paid by the buyer)
// between a new seller and a funded buyer in dispute.
func (h *harness) hookedDispute() (rc *hookReceiver, seller, buyer, escrowID string) {
	h.t.Helper()
	rc = newHookReceiver(h.t, h.m.SigningSecrets[domain.Test], 0)
	h.do(req{method: "PUT", path: "/v1/merchant/webhook", key: h.sa(), body: map[string]any{"url": rc.srv.URL}}).expect(h.t, 200, "")
	seller = h.createCustomer(h.sa(), "s@x.com", "08035557001")
	buyer = h.funded("b@x.com", "08035557002", 20000)
	escrowID, _ = h.disputedEscrow(seller, buyer, "buyer", 0, nil, 10250)
	return rc, seller, buyer, escrowID
}
