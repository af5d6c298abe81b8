package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/escrowd/escrowd/eventstore/postgres"
)

// appendCollector exports how the PostgreSQL store's appends went (group
// commit, eventstore/postgres/batch.go): a busy server sends most of them
// in groups, and a falling share means appends rarely meet each other in
// flight (little load) or that groups keep failing as a whole.
type appendCollector struct {
	store interface{ AppendStats() postgres.AppendStats }
	alone *prometheus.Desc
	calls *prometheus.Desc
}

func newAppendCollector(store interface{ AppendStats() postgres.AppendStats }) *appendCollector {
	return &appendCollector{
		store: store,
		alone: prometheus.NewDesc("escrowd_eventstore_appends_total",
			"Appends this process made, by how they were sent: alone, or in a grouped call.", []string{"sent"}, nil),
		calls: prometheus.NewDesc("escrowd_eventstore_group_calls_total",
			"Grouped append calls this process made (each one transaction for all its appends).", nil, nil),
	}
}

func (c *appendCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.alone
	ch <- c.calls
}

func (c *appendCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.store.AppendStats()
	ch <- prometheus.MustNewConstMetric(c.alone, prometheus.CounterValue, float64(st.Alone), "alone")
	ch <- prometheus.MustNewConstMetric(c.alone, prometheus.CounterValue, float64(st.Grouped), "grouped")
	ch <- prometheus.MustNewConstMetric(c.calls, prometheus.CounterValue, float64(st.Calls))
}
