package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/escrowd/escrowd/internal/promreg"
)

// Metrics are the HTTP layer's Prometheus instruments.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics registers the HTTP instruments on reg. Registering twice on
// one registry (several servers in one process) shares the instruments.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "escrowd_http_requests_total",
			Help: "HTTP requests by method, route template and status.",
		}, []string{"method", "route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "escrowd_http_request_duration_seconds",
			Help:    "HTTP request latency by method and route template.",
			Buckets: prometheus.DefBuckets,
		}, []string{"method", "route"}),
	}
	if reg != nil {
		m.requests = registerShared(reg, m.requests)
		m.duration = registerShared(reg, m.duration)
	}
	return m
}

func registerShared[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	return promreg.Shared(reg, c)
}

// Middleware records every request. Labels are bounded: route is the
// matched template (c.Path()), never the raw URL; an unmatched request is
// "unmatched"; unknown methods are "OTHER". An error is rendered here
// (c.Error) so the status is the one the client gets, and still returned
// for outer middleware; the error handler ignores a committed response.
func (m *Metrics) Middleware() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (err error) {
			start := time.Now()
			finished := false
			defer func() {
				status := c.Response().Status
				if !finished { // panicking: the recover middleware answers 500
					status = http.StatusInternalServerError
				}
				m.observe(c, status, time.Since(start))
			}()
			err = next(c)
			if err != nil && !c.Response().Committed {
				c.Error(err)
			}
			finished = true
			return err
		}
	}
}

func (m *Metrics) observe(c echo.Context, status int, d time.Duration) {
	method := metricMethod(c.Request().Method)
	route := c.Path()
	if route == "" {
		route = "unmatched"
	}
	m.requests.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(method, route).Observe(d.Seconds())
}

func metricMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "OTHER"
}

// MetricsHandler serves g in the Prometheus exposition format. The process
// serves it on a listener of its own (ESCROW_METRICS_ADDR), never on the
// API's.
func MetricsHandler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{})
}
