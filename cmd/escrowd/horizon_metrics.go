package main

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/escrowd/escrowd/eventstore"
)

// horizonCollector exports the event store's horizon (eventstore.Horizon)
// at every scrape, so an alert can fire on what /readyz reports: events
// that committed but wait behind an open transaction, holding every read
// model and the webhook subscriber back while their lags read 0. A scrape
// costs one indexed count, capped; a store that cannot answer in time
// exports nothing for that scrape rather than a stale value.
//
// The cap is `projections status`'s (horizonCountLimit): the count is what
// a scrape's time goes to, about 1.1 ms per thousand held events with the
// rows cached on an idle server (measured over 200,000), more when the
// server is busy or the rows are not cached. Counted up to a million, a
// horizon stuck long enough would take most of the scrape's 2 s or more,
// and a scrape that runs out exports no gauge: they would vanish while
// the horizon stays stuck, which resolves an alert on them instead of
// keeping it firing.
type horizonCollector struct {
	store   eventstore.HorizonReporter
	held    *prometheus.Desc
	heldFor *prometheus.Desc
}

func newHorizonCollector(store eventstore.HorizonReporter) *horizonCollector {
	return &horizonCollector{
		store: store,
		held: prometheus.NewDesc("escrowd_eventstore_horizon_held_events",
			fmt.Sprintf("Committed events not yet readable because an older transaction appending to the log is still open (counted up to %d).", horizonCountLimit), nil, nil),
		heldFor: prometheus.NewDesc("escrowd_eventstore_horizon_held_seconds",
			"How long the oldest such event has waited; 0 when none is held.", nil, nil),
	}
}

func (c *horizonCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.held
	ch <- c.heldFor
}

func (c *horizonCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// The blocker is for /readyz and `projections status`; a metric
	// carries only numbers.
	h, err := c.store.Horizon(ctx, horizonCountLimit, time.Duration(1<<62))
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(h.Held))
	ch <- prometheus.MustNewConstMetric(c.heldFor, prometheus.GaugeValue, h.HeldFor.Seconds())
}
