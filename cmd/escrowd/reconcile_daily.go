// The daily reconciliation the service runs itself.

package main

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/projections"
)

// dailyReconciler runs `escrowd reconcile` for the previous day, for every
// environment whose provider lists transfers or transactions, soon after the process
// starts and then every day, and exports the outcome of each run. Runs of
// several processes take turns on an advisory lock; a second run of one
// day changes nothing (healing goes through the exactly-once path).
type dailyReconciler struct {
	svc  *app.Service
	q    *projections.Queries
	pool *pgxpool.Pool
	log  *zap.Logger
	// first is the wait before the first run, every the wait between runs.
	first, every time.Duration
	now          func() time.Time

	mu   sync.Mutex
	last map[domain.Environment]dailyRun

	differences, healed, lastRun             *prometheus.Desc
	collectionDifferences, collectionsHealed *prometheus.Desc
	failures                                 *prometheus.CounterVec
}

type dailyRun struct {
	at                  time.Time
	differences, healed int
	// Of collections, when the provider collects.
	collections                              bool
	collectionDifferences, collectionsHealed int
}

func newDailyReconciler(svc *app.Service, q *projections.Queries, pool *pgxpool.Pool, log *zap.Logger) *dailyReconciler {
	env := []string{"environment"}
	return &dailyReconciler{svc: svc, q: q, pool: pool, log: log,
		first: time.Minute, every: 24 * time.Hour, now: time.Now, last: map[domain.Environment]dailyRun{},
		differences: prometheus.NewDesc("escrowd_reconcile_differences",
			"Differences between the ledger's payouts and the provider's transfers that the last daily reconciliation left.", env, nil),
		healed: prometheus.NewDesc("escrowd_reconcile_healed",
			"Payouts the last daily reconciliation settled from the provider's word.", env, nil),
		collectionDifferences: prometheus.NewDesc("escrowd_reconcile_collection_differences",
			"Differences between the ledger's collections and the provider's transactions that the last daily reconciliation left.", env, nil),
		collectionsHealed: prometheus.NewDesc("escrowd_reconcile_collections_healed",
			"Provider transactions the last daily reconciliation credited, their event having never been acted on.", env, nil),
		lastRun: prometheus.NewDesc("escrowd_reconcile_last_success_timestamp_seconds",
			"When the last daily reconciliation completed (Unix time).", env, nil),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "escrowd_reconcile_failures_total",
			Help: "Daily reconciliations that could not complete (the provider or the database did not answer)."}, env),
	}
}

// Run reconciles every day until ctx ends.
func (d *dailyReconciler) Run(ctx context.Context) error {
	wait := d.first
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		d.runOnce(ctx)
		wait = d.every
	}
}

// runOnce reconciles the previous day (UTC) of every environment whose
// provider lists transfers or transactions.
func (d *dailyReconciler) runOnce(ctx context.Context) {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return
	}
	defer conn.Release()
	// One process at a time: wait for another's run to end rather than
	// ask the provider twice at once.
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext('escrowd:reconcile'))`); err != nil {
		return
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtext('escrowd:reconcile'))`)
	}()
	today := d.now().UTC().Truncate(24 * time.Hour)
	from := today.AddDate(0, 0, -1)
	for _, env := range []domain.Environment{domain.Test, domain.Live} {
		if set := d.svc.Gateways[env]; set.Transfers == nil && set.Charges == nil {
			continue
		}
		rep, err := reconcileRun(ctx, d.svc, d.q, env, from, today)
		if err != nil {
			d.failures.WithLabelValues(string(env)).Inc()
			d.log.Error("reconcile: the daily reconciliation could not complete", zap.String("environment", string(env)),
				zap.String("day", from.Format(time.DateOnly)), zap.Error(err))
			continue
		}
		for _, h := range rep.Healed {
			d.log.Warn("reconcile: healed", zap.String("environment", string(env)), zap.Stringer("payout", h))
		}
		for _, diff := range rep.Differences {
			d.log.Error("reconcile: difference", zap.String("environment", string(env)), zap.Stringer("payout", diff))
		}
		run := dailyRun{at: d.now(), differences: len(rep.Differences), healed: len(rep.Healed)}
		if c := rep.Collections; c != nil {
			for _, h := range c.Healed {
				d.log.Warn("reconcile: healed", zap.String("environment", string(env)), zap.Stringer("collection", h))
			}
			for _, diff := range c.Differences {
				d.log.Error("reconcile: difference", zap.String("environment", string(env)), zap.Stringer("collection", diff))
			}
			run.collections, run.collectionDifferences, run.collectionsHealed = true, len(c.Differences), len(c.Healed)
		}
		d.mu.Lock()
		d.last[env] = run
		d.mu.Unlock()
	}
}

func (d *dailyReconciler) Describe(ch chan<- *prometheus.Desc) {
	ch <- d.differences
	ch <- d.healed
	ch <- d.lastRun
	ch <- d.collectionDifferences
	ch <- d.collectionsHealed
	d.failures.Describe(ch)
}

func (d *dailyReconciler) Collect(ch chan<- prometheus.Metric) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for env, r := range d.last {
		ch <- prometheus.MustNewConstMetric(d.differences, prometheus.GaugeValue, float64(r.differences), string(env))
		ch <- prometheus.MustNewConstMetric(d.healed, prometheus.GaugeValue, float64(r.healed), string(env))
		ch <- prometheus.MustNewConstMetric(d.lastRun, prometheus.GaugeValue, float64(r.at.Unix()), string(env))
		if r.collections {
			ch <- prometheus.MustNewConstMetric(d.collectionDifferences, prometheus.GaugeValue, float64(r.collectionDifferences), string(env))
			ch <- prometheus.MustNewConstMetric(d.collectionsHealed, prometheus.GaugeValue, float64(r.collectionsHealed), string(env))
		}
	}
	d.failures.Collect(ch)
}
