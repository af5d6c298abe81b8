package httpapi

import (
	"context"
	"net/http"
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
		{"unknown route", req{path: "/v1/nothing-here", key: h.std()}, 404, "Route not found"},
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
	// The limit is checked before the role: a limited standard key on a
	// super-admin route still gets 429.
	h.do(req{path: "/v1/probe/sa", key: h.std()}).expect(t, 429, "Too many request")
	// Another key of the same merchant has its own budget.
	h.do(req{path: "/v1/customers", key: h.sa()}).expect(t, 200, "")
}

func TestTwoInstancesShareTheRateLimit(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.RateLimitPerMinute = 5 })
	// A second API instance on the same database.
	second := New(h.api.cfg, Deps{App: h.svc, Queries: h.api.rm, Waiter: h.runner,
		Limiter: NewPGRateLimiter(h.api.rm.Pool(), 5), Directory: h.api.dir})
	srv2 := newTestServer(t, second)
	codes := map[int]int{}
	for i := 0; i < 10; i++ {
		target := h.srv.URL
		if i%2 == 1 {
			target = srv2
		}
		hr, _ := http.NewRequest("GET", target+"/v1/customers", nil)
		hr.Header.Set("Authorization", "Bearer "+h.std())
		res, err := http.DefaultClient.Do(hr)
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
