package webhooks

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/internal/promreg"
)

// DefaultMetricsInterval is how often a dispatcher refreshes the outbox
// gauges.
const DefaultMetricsInterval = 5 * time.Second

// Metrics are the outbox's Prometheus gauges. They describe the whole
// outbox (every instance reports the same numbers: aggregate them with max,
// not sum), as of the last refresh by a dispatcher of this process.
//
// started counts, per process, the attempts this process's dispatchers
// started, by how they got them: "handoff" (stored leased by this
// process's subscriber) or "lease". Sum it over instances.
type Metrics struct {
	pending prometheus.Gauge
	oldest  prometheus.Gauge
	failed  prometheus.Gauge
	started *prometheus.CounterVec
}

// How a dispatcher got an attempt (the via label of started).
const (
	viaHandoff = "handoff"
	viaLease   = "lease"
)

// NewMetrics registers the outbox gauges on reg. Registering twice on one
// registry (several dispatchers in one process) shares the gauges.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "escrowd_webhook_outbox_pending",
			Help: "Webhook deliveries not yet delivered and not failed: waiting for an attempt or in flight.",
		}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "escrowd_webhook_outbox_oldest_pending_age_seconds",
			Help: "Age of the oldest webhook delivery not yet delivered and not failed (0 when there is none).",
		}),
		failed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "escrowd_webhook_outbox_failed",
			Help: "Webhook deliveries that exhausted their retries, until retried by the merchant or removed by retention.",
		}),
		started: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "escrowd_webhook_attempts_started_total",
			Help: "Webhook delivery attempts started by this process, by how the dispatcher got them: handed over by the subscriber, or leased.",
		}, []string{"via"}),
	}
	if reg != nil {
		m.pending = promreg.Shared(reg, m.pending)
		m.oldest = promreg.Shared(reg, m.oldest)
		m.failed = promreg.Shared(reg, m.failed)
		m.started = promreg.Shared(reg, m.started)
	}
	return m
}

// refresh sets the gauges from the outbox in one query: the pending side
// reads the lease's partial index, the failed count the retention's.
func (m *Metrics) refresh(ctx context.Context, pool *pgxpool.Pool) error {
	var (
		pending, failed int64
		oldest          *float64
	)
	err := pool.QueryRow(ctx, `
		SELECT p.n, p.oldest, f.n
		  FROM (SELECT count(*) AS n, extract(epoch FROM now() - min(created_at))::float8 AS oldest
		          FROM webhook_deliveries WHERE status IN ('pending', 'delivering')) p,
		       (SELECT count(*) AS n FROM webhook_deliveries WHERE status = 'failed') f`).
		Scan(&pending, &oldest, &failed)
	if err != nil {
		return err
	}
	age := 0.0
	if oldest != nil && *oldest > 0 {
		age = *oldest
	}
	m.pending.Set(float64(pending))
	m.oldest.Set(age)
	m.failed.Set(float64(failed))
	return nil
}

// refreshMetrics updates the outbox gauges every MetricsInterval until ctx
// ends.
func (d *Dispatcher) refreshMetrics(ctx context.Context) {
	failing := false
	for {
		qctx, cancel := context.WithTimeout(ctx, max(d.MetricsInterval, time.Second))
		err := d.Metrics.refresh(qctx, d.Pool)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil && !failing {
			d.Log.Warn("webhooks: cannot refresh the outbox gauges", zap.Error(err))
		}
		failing = err != nil
		sleepCtx(ctx, d.MetricsInterval)
		if ctx.Err() != nil {
			return
		}
	}
}
