package httpapi

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
)

func TestMetricsRecordRouteTemplates(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	e := echo.New()
	e.Use(m.Middleware())
	e.GET("/v1/customer/get/:customerId", func(c echo.Context) error {
		if c.Param("customerId") == "missing" {
			return echo.NewHTTPError(http.StatusNotFound, "Customer not found")
		}
		return c.JSON(http.StatusOK, map[string]string{"id": c.Param("customerId")})
	})
	e.POST("/v1/fail", func(c echo.Context) error { return errors.New("boom") })
	e.GET("/metrics", echo.WrapHandler(MetricsHandler(reg)))

	for _, r := range []struct {
		method, path string
		code         int
	}{
		{http.MethodGet, "/v1/customer/get/cus_123", 200},
		{http.MethodGet, "/v1/customer/get/cus_456", 200},
		{http.MethodGet, "/v1/customer/get/missing", 404},
		{http.MethodPost, "/v1/fail", 500},
		{http.MethodGet, "/no/such/route/x1", 404},
		{"BREW", "/v1/customer/get/cus_1", 405},
	} {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(r.method, r.path, nil))
		if rec.Code != r.code {
			t.Fatalf("%s %s: status %d, want %d", r.method, r.path, rec.Code, r.code)
		}
	}

	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	out := rec.Body.String()
	for _, want := range []string{
		`escrowd_http_requests_total{method="GET",route="/v1/customer/get/:customerId",status="200"} 2`,
		`escrowd_http_requests_total{method="GET",route="/v1/customer/get/:customerId",status="404"} 1`,
		`escrowd_http_requests_total{method="POST",route="/v1/fail",status="500"} 1`,
		`escrowd_http_requests_total{method="GET",route="unmatched",status="404"} 1`,
		`escrowd_http_requests_total{method="OTHER",route="/v1/customer/get/:customerId",status="405"} 1`,
		`escrowd_http_request_duration_seconds_count{method="GET",route="/v1/customer/get/:customerId"} 3`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %s\n%s", want, out)
		}
	}
	for _, raw := range []string{"cus_123", "missing", "x1", "BREW"} {
		if strings.Contains(out, raw) {
			t.Errorf("raw request data %q leaked into labels", raw)
		}
	}
}

func TestMetricsShareARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := NewMetrics(reg), NewMetrics(reg) // two servers in one process
	if a.requests != b.requests || a.duration != b.duration {
		t.Fatal("second registration did not reuse the instruments")
	}
}
