package httpapi

import (
	"strings"
	"testing"
)

func TestPlatformEndpoints(t *testing.T) {
	h := newHarness(t)
	h.do(req{path: "/healthz"}).expect(t, 200, "OK")
	ready := h.do(req{path: "/readyz"}).expect(t, 200, "Ready").obj()
	if _, hooks := ready["webhookLag"]; ready["database"] != "ok" || ready["projectionLag"] != 0.0 || hooks {
		t.Fatalf("readyz %v", ready)
	}
	h.do(req{path: "/v1/customers", key: h.std()}).expect(t, 200, "")
	// The metrics have a listener of their own (serve's
	// ESCROW_METRICS_ADDR), not the API's.
	h.do(req{path: "/metrics"}).expect(t, 404, "Route not found; the API reference is at /docs")
	big := `{"firstname":"` + strings.Repeat("a", 2<<20) + `"}`
	h.do(req{method: "POST", path: "/v1/customer/create", key: h.sa(), body: big}).expect(t, 413, "Request body too large")
}
