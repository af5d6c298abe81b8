package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/escrowd/escrowd/internal/inbox"
)

// inboxCollector exports the providers' inbox at every scrape: events
// kept and not yet processed, those failing (retried with backoff), and
// the oldest's wait. Alert on failing, or on an age that keeps growing: a
// payout's or a deposit's money waits behind them.
type inboxCollector struct {
	store                    inbox.Store
	pending, failing, oldest *prometheus.Desc
}

func newInboxCollector(store inbox.Store) *inboxCollector {
	return &inboxCollector{store: store,
		pending: prometheus.NewDesc("escrowd_provider_events_pending", "Payment providers' events kept and not yet processed.", nil, nil),
		failing: prometheus.NewDesc("escrowd_provider_events_failing", "Pending provider events whose processing has failed at least once.", nil, nil),
		oldest:  prometheus.NewDesc("escrowd_provider_events_oldest_pending_age_seconds", "How long the oldest pending provider event has waited; 0 when none.", nil, nil),
	}
}

func (c *inboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.failing
	ch <- c.oldest
}

func (c *inboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	pending, failing, oldest, err := c.store.Backlog(ctx)
	if err != nil {
		return // nothing rather than a stale value
	}
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(pending))
	ch <- prometheus.MustNewConstMetric(c.failing, prometheus.GaugeValue, float64(failing))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, oldest.Seconds())
}
