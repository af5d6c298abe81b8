package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/escrowd/escrowd/projections"
)

// parkedCollector exports, at every scrape, which read models stopped at an
// event they cannot apply (escrowd_projections_parked{projection}: 1 while
// parked, 0 otherwise): their reads answer 503 until an operator retries or
// skips the event, and readiness does not fail for them, so this is the
// alert. It reads the checkpoints' table, so every instance reports the
// same; a scrape that cannot read it in time exports nothing.
type parkedCollector struct {
	runner *projections.Runner
	parked *prometheus.Desc
}

func newParkedCollector(runner *projections.Runner) *parkedCollector {
	return &parkedCollector{runner: runner, parked: prometheus.NewDesc("escrowd_projections_parked",
		"1 while the read model is stopped at an event it cannot apply (escrowd projections status names it).",
		[]string{"projection"}, nil)}
}

func (c *parkedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.parked }

func (c *parkedCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	parked, err := c.runner.Parked(ctx)
	if err != nil {
		return
	}
	for _, p := range c.runner.Projectors() {
		v := 0.0
		if parked[p.Name()] != nil {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.parked, prometheus.GaugeValue, v, p.Name())
	}
}
