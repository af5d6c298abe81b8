package httpapi

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
)

func TestAuthTable(t *testing.T) {
	h := newHarness(t)
	h.probe(http.MethodGet, "/v1/probe/required", Policy{CID: CIDRequired, Permission: CanWithdraw})
	h.probe(http.MethodGet, "/v1/probe/forbidden", Policy{CID: CIDForbidden})
	h.probe(http.MethodGet, "/v1/probe/optional", Policy{CID: CIDOptional})
	h.probe(http.MethodGet, "/v1/probe/sa", Policy{CID: CIDForbidden, SuperAdmin: true})

	cust := h.createCustomer(h.sa(), "ada@example.com", "08031234567")
	other := h.newMerchant(false)
	otherCust := h.createCustomer(key(other, domain.Test, merchant.SuperAdmin), "bob@example.com", "08031234568")
	liveCust := h.do(req{method: "POST", path: "/v1/customer/create", key: key(h.m, domain.Live, merchant.SuperAdmin), host: liveHost,
		body: map[string]any{"firstname": "Liv", "lastname": "E", "email": "live@example.com", "phone": "08031234569"}}).expect(t, 201, "").obj()["customerId"].(string)

	cases := []struct {
		name    string
		r       req
		status  int
		message string
	}{
		{"no authorization header", req{path: "/v1/probe/optional"}, 401, "No token provided"},
		{"not bearer", req{path: "/v1/probe/optional", headers: map[string]string{"Authorization": "Basic abc"}}, 403, "Unauthorized Access"},
		{"malformed key", req{path: "/v1/probe/optional", key: "sk_test_short"}, 403, "Unauthorized Access"},
		{"unknown key", req{path: "/v1/probe/optional", key: "sk_test_" + strings.Repeat("A", 40)}, 403, "Unauthorized Access"},
		{"live key on the test host", req{path: "/v1/probe/optional", key: key(h.m, domain.Live, merchant.Standard)}, 403, "Unauthorized Access"},
		{"test key on the live host", req{path: "/v1/probe/optional", key: h.std(), host: liveHost}, 403, "Unauthorized Access"},
		{"live key on the live host", req{path: "/v1/probe/optional", key: key(h.m, domain.Live, merchant.Standard), host: liveHost}, 200, "ok"},
		{"standard key on super-admin route", req{path: "/v1/probe/sa", key: h.std()}, 401, "Access denied"},
		{"super-admin key on super-admin route", req{path: "/v1/probe/sa", key: h.sa()}, 200, "ok"},
		{"customer-id required", req{path: "/v1/probe/required", key: h.std()}, 400, "customer-id header is required"},
		{"customer-id forbidden", req{path: "/v1/probe/forbidden", key: h.std(), cid: cust}, 400, "customer-id is not allowed in request header"},
		{"customer-id unknown", req{path: "/v1/probe/optional", key: h.std(), cid: "nope"}, 404, "Customer not found"},
		{"customer of another merchant", req{path: "/v1/probe/optional", key: h.std(), cid: otherCust}, 403, "Customer does not belong to the merchant"},
		{"customer of the other environment", req{path: "/v1/probe/optional", key: h.std(), cid: liveCust}, 403, "Customer does not belong to the merchant"},
		{"own customer", req{path: "/v1/probe/required", key: h.std(), cid: cust}, 200, "ok"},
		{"unknown route", req{path: "/v1/nothing-here", key: h.std()}, 404, "Route not found; the API reference is at /docs"},
		{"wrong method", req{method: "DELETE", path: "/v1/customers", key: h.std()}, 405, "Method not allowed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.r.method == "" {
				c.r.method = http.MethodGet
			}
			h.do(c.r).expect(t, c.status, c.message)
		})
	}

	// Permissions and blocking, through the real routes.
	h.do(req{method: "PUT", path: "/v1/customer/permissions/" + cust, key: h.sa(), body: map[string]any{"canWithdraw": false}}).expect(t, 200, "Customer permissions updated successfully")
	h.do(req{path: "/v1/probe/required", key: h.std(), cid: cust}).expect(t, 401, "Access denied")
	h.do(req{path: "/v1/probe/optional", key: h.std(), cid: cust}).expect(t, 200, "ok")
	h.do(req{method: "PUT", path: "/v1/customer/block/" + cust, key: h.sa(), body: map[string]any{"reason": "chargebacks"}}).expect(t, 200, "Customer blocked successfully")
	h.do(req{path: "/v1/probe/optional", key: h.std(), cid: cust}).expect(t, 401, "Your account is disabled. Please contact support")
	h.do(req{method: "PUT", path: "/v1/customer/unblock/" + cust, key: h.sa()}).expect(t, 200, "Customer unblocked successfully")
	h.do(req{path: "/v1/probe/optional", key: h.std(), cid: cust}).expect(t, 200, "ok")

	// Revocation takes effect for the very next request.
	keyID := ""
	for _, k := range h.m.Keys {
		if k.Environment == domain.Test && k.Role == merchant.Standard {
			keyID = k.KeyID
		}
	}
	pos, err := h.svc.UpdateMerchant(context.Background(), h.m.MerchantID, func(m merchant.State) ([]domain.Event, error) {
		return merchant.RevokeKey(m, keyID, h.svc.Engine.Now())
	})
	if err != nil {
		t.Fatal(err)
	}
	h.wait(pos)
	h.do(req{path: "/v1/probe/optional", key: h.std()}).expect(t, 403, "Unauthorized Access")
}

func TestLiveAllowlist(t *testing.T) {
	h := newHarness(t)
	h.probe(http.MethodGet, "/v1/probe", Policy{CID: CIDOptional})
	live := key(h.m, domain.Live, merchant.Standard)
	setAllow := func(entries ...string) {
		pos, err := h.svc.UpdateMerchant(context.Background(), h.m.MerchantID, func(merchant.State) ([]domain.Event, error) {
			return []domain.Event{merchant.AllowlistSet{Entries: entries}}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		h.wait(pos)
	}
	setAllow("10.1.2.3")
	h.do(req{path: "/v1/probe", key: live, host: liveHost}).expect(t, 403, "Unauthorized IP address")
	// The allowlist applies to live keys only.
	h.do(req{path: "/v1/probe", key: h.std()}).expect(t, 200, "ok")
	// X-Forwarded-For is not trusted without ESCROW_TRUSTED_PROXIES.
	h.do(req{path: "/v1/probe", key: live, host: liveHost, headers: map[string]string{"X-Forwarded-For": "10.1.2.3"}}).expect(t, 403, "Unauthorized IP address")
	setAllow("10.1.2.3", "127.0.0.0/8")
	h.do(req{path: "/v1/probe", key: live, host: liveHost}).expect(t, 200, "ok")
	setAllow()
	h.do(req{path: "/v1/probe", key: live, host: liveHost}).expect(t, 200, "ok")
}

func TestTrustedProxy(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.TrustedProxies = mustCIDRs("127.0.0.1/32")
	})
	h.probe(http.MethodGet, "/v1/probe", Policy{CID: CIDOptional})
	pos, err := h.svc.UpdateMerchant(context.Background(), h.m.MerchantID, func(merchant.State) ([]domain.Event, error) {
		return []domain.Event{merchant.AllowlistSet{Entries: []string{"203.0.113.7"}}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	h.wait(pos)
	live := key(h.m, domain.Live, merchant.Standard)
	h.do(req{path: "/v1/probe", key: live, host: liveHost, headers: map[string]string{"X-Forwarded-For": "203.0.113.7"}}).expect(t, 200, "ok")
	h.do(req{path: "/v1/probe", key: live, host: liveHost, headers: map[string]string{"X-Forwarded-For": "203.0.113.8"}}).expect(t, 403, "Unauthorized IP address")
}

func TestRateLimitOverHTTP(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.RateLimitPerMinute = 3 })
	h.probe(http.MethodGet, "/v1/probe/sa", Policy{CID: CIDForbidden, SuperAdmin: true})
	for i := 0; i < 3; i++ {
		r := h.do(req{path: "/v1/customers", key: h.std()}).expect(t, 200, "")
		if r.Header.Get("RateLimit-Policy") != "3;w=60" {
			t.Fatalf("RateLimit-Policy = %q", r.Header.Get("RateLimit-Policy"))
		}
		if !strings.Contains(r.Header.Get("RateLimit"), "remaining="+strconv.Itoa(2-i)) {
			t.Fatalf("RateLimit = %q", r.Header.Get("RateLimit"))
		}
	}
	r := h.do(req{path: "/v1/customers", key: h.std()})
	if r.Status != 429 || string(r.Raw) != `{"status":429,"message":"Too many request"}` {
		t.Fatalf("got %d %s", r.Status, r.Raw)
	}
	if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Fatalf("Retry-After = %q", r.Header.Get("Retry-After"))
	}
	// The 429 carries the quota headers too: nothing left, the full quota
	// back within the window.
	if got := r.Header.Get("RateLimit-Policy"); got != "3;w=60" {
		t.Fatalf("429 RateLimit-Policy = %q", got)
	}
	m := regexp.MustCompile(`^limit=3, remaining=0, reset=(\d+)$`).FindStringSubmatch(r.Header.Get("RateLimit"))
	if m == nil {
		t.Fatalf("429 RateLimit = %q", r.Header.Get("RateLimit"))
	}
	if reset, _ := strconv.Atoi(m[1]); reset < 1 || reset > 60 {
		t.Fatalf("429 RateLimit reset = %d", reset)
	}
	// The limit is checked before the role: a limited standard key on a
	// super-admin route still gets 429.
	h.do(req{path: "/v1/probe/sa", key: h.std()}).expect(t, 429, "Too many request")
	// Another key of the same merchant has its own budget.
	h.do(req{path: "/v1/customers", key: h.sa()}).expect(t, 200, "")
}

func TestTwoInstancesShareTheRateLimit(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.RateLimitPerMinute = 5 })
	// A second API instance on the same database.
	second := New(h.api.cfg, Deps{App: h.svc, Queries: h.api.queries, Last: h.api.last, Waiter: h.runner,
		Limiter: NewPGRateLimiter(h.api.queries.Pool(), 5), Directory: h.api.dir})
	srv2 := newTestServer(t, second)
	codes := map[int]int{}
	for i := 0; i < 10; i++ {
		target := h.srv.URL
		if i%2 == 1 {
			target = srv2
		}
		hr, _ := http.NewRequest("GET", target+"/v1/customers", nil)
		hr.Header.Set("Authorization", "Bearer "+h.std())
		res, err := h.client().Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		codes[res.StatusCode]++
	}
	if codes[200] != 5 || codes[429] != 5 {
		t.Fatalf("codes %v: the limit must hold across instances", codes)
	}
}

// TestAllowlistBeforeRateLimit: a live key from an address outside its
// allowlist is refused for the address even when its quota is spent, and
// the refusal spends no quota.
func TestAllowlistBeforeRateLimit(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.RateLimitPerMinute = 2 })
	h.probe(http.MethodGet, "/v1/probe", Policy{CID: CIDOptional})
	live := key(h.m, domain.Live, merchant.Standard)
	setAllow := func(entries ...string) {
		t.Helper()
		pos, err := h.svc.UpdateMerchant(context.Background(), h.m.MerchantID, func(merchant.State) ([]domain.Event, error) {
			return []domain.Event{merchant.AllowlistSet{Entries: entries}}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		h.wait(pos)
	}
	// Use up the quota from an allowed address.
	for range 2 {
		h.do(req{path: "/v1/probe", key: live, host: liveHost}).expect(t, 200, "ok")
	}
	h.do(req{path: "/v1/probe", key: live, host: liveHost}).expect(t, 429, "Too many request")
	setAllow("10.1.2.3")
	for range 2 {
		r := h.do(req{path: "/v1/probe", key: live, host: liveHost}).expect(t, 403, "Unauthorized IP address")
		for _, hd := range []string{"Retry-After", "RateLimit", "RateLimit-Policy"} {
			if v := r.Header.Get(hd); v != "" {
				t.Fatalf("a refused address reached the rate limit: %s = %q", hd, v)
			}
		}
	}
	// The quota is still spent: from an allowed address the key is limited.
	setAllow("127.0.0.0/8")
	h.do(req{path: "/v1/probe", key: live, host: liveHost}).expect(t, 429, "Too many request")
}

// TestAuthCheckOrder: where a request fails several rows of the auth table
// of authentication, the earliest row decides the answer; checked on the
// real routes.
func TestAuthCheckOrder(t *testing.T) {
	h := newHarness(t)
	cust := h.createCustomer(h.sa(), "order@example.com", "08031234567")

	t.Run("super-admin before customer-id forbidden", func(t *testing.T) {
		routes := []struct{ method, path string }{
			{"POST", "/v1/customer/create"},
			{"PUT", "/v1/customer/update/" + cust},
			{"PUT", "/v1/customer/permissions/" + cust},
			{"PUT", "/v1/customer/block/" + cust},
			{"PUT", "/v1/customer/unblock/" + cust},
			{"PUT", "/v1/escrow/additional-fee/PT_UNKNOWN0000000000"},
		}
		body := customerBody("x@example.com", "08031234500")
		for _, rt := range routes {
			t.Run(rt.method+" "+rt.path, func(t *testing.T) {
				// A standard key is refused for its role before the header is looked at.
				h.do(req{method: rt.method, path: rt.path, key: h.std(), cid: cust, body: body}).expect(t, 401, "Access denied")
				// The header is refused before it is resolved: an unknown id is still 400.
				h.do(req{method: rt.method, path: rt.path, key: h.sa(), cid: "no-such-customer", body: body}).
					expect(t, 400, "customer-id is not allowed in request header")
			})
		}
		// Nothing was written by the refused requests.
		got := h.do(req{path: "/v1/customer/get/" + cust, key: h.std()}).expect(t, 200, "Customer fetched successfully").obj()
		if got["status"] != "active" || got["email"] != "order@example.com" {
			t.Fatalf("customer changed by refused requests: %v", got)
		}
	})

	t.Run("blocked before missing permission", func(t *testing.T) {
		other := h.newMerchant(true)
		otherSA := key(other, domain.Test, merchant.SuperAdmin)
		foreign := h.createCustomer(otherSA, "foreign@example.com", "08031234569")
		h.do(req{method: "PUT", path: "/v1/customer/permissions/" + cust, key: h.sa(),
			body: map[string]any{"canBuy": false, "canSell": false}}).expect(t, 200, "Customer permissions updated successfully")
		h.do(req{method: "PUT", path: "/v1/customer/block/" + cust, key: h.sa(), body: map[string]any{"reason": "review"}}).
			expect(t, 200, "Customer blocked successfully")
		h.do(req{method: "PUT", path: "/v1/customer/block/" + foreign, key: otherSA}).expect(t, 200, "Customer blocked successfully")

		card := map[string]any{"gateway": "card"}
		pay := req{method: "POST", path: "/v1/payment/escrow", key: h.std(), cid: cust, body: card}
		sell := req{method: "POST", path: "/v1/escrow/create", key: h.std(), cid: cust, body: map[string]any{}}
		cases := []struct {
			name    string
			r       req
			status  int
			message string
		}{
			{"pay escrow: blocked, no canBuy", pay, 401, "Your account is disabled. Please contact support"},
			{"create escrow: blocked, no canSell", sell, 401, "Your account is disabled. Please contact support"},
			{"another merchant's blocked customer", req{method: "POST", path: "/v1/payment/escrow", key: h.std(), cid: foreign, body: card},
				403, "Customer does not belong to the merchant"},
			{"unknown customer", req{method: "POST", path: "/v1/payment/escrow", key: h.std(), cid: "no-such-customer", body: card},
				404, "Customer not found"},
			{"standard key, no customer-id where required", req{method: "POST", path: "/v1/payment/escrow", key: h.std(), body: card},
				400, "customer-id header is required"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) { h.do(c.r).expect(t, c.status, c.message) })
		}
		h.do(req{method: "PUT", path: "/v1/customer/unblock/" + cust, key: h.sa()}).expect(t, 200, "Customer unblocked successfully")
		h.do(pay).expect(t, 401, "Access denied")
		h.do(sell).expect(t, 401, "Access denied")
		h.do(req{method: "PUT", path: "/v1/customer/permissions/" + cust, key: h.sa(), body: map[string]any{"canBuy": true}}).
			expect(t, 200, "Customer permissions updated successfully")
		// Past auth: the handler answers.
		h.do(pay).expect(t, 403, "This feature is not enabled on your merchant account")
	})
}
