package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/internal/inbox"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// `projections status` shows the providers' events waiting, and each
// whose processing failed with its error and next attempt.
func TestProjectionsStatusShowsFailingProviderEvents(t *testing.T) {
	db := pgtest.NewURL(t)
	ctx := context.Background()
	pool := pgtest.OpenPool(t, db)
	st := inbox.Store{Pool: pool}
	for _, id := range []string{"transfer.failed:1", "transfer.success:2"} {
		if _, err := st.Put(ctx, inbox.Event{Provider: "paystack", Environment: domain.Live, ID: id, Name: strings.Split(id, ":")[0], Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	items, err := st.Claim(ctx, 1, time.Minute)
	if err != nil || len(items) != 1 {
		t.Fatalf("claimed %v, %v", items, err)
	}
	if _, err := st.Retry(ctx, items[0], errors.New("the provider did not answer"), time.Hour); err != nil {
		t.Fatal(err)
	}
	out, err := cli(t, db, "projections", "status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Provider events: 2 pending, 0 processed.") ||
		!strings.Contains(out, "failing: paystack live "+items[0].ID) || !strings.Contains(out, "the provider did not answer") {
		t.Fatalf("status:\n%s", out)
	}
	raw, err := cli(t, db, "projections", "status", "--json")
	if err != nil {
		t.Fatal(err)
	}
	pending, failing, oldest, err := st.Backlog(ctx)
	if err != nil || pending != 2 || failing != 1 || oldest < 0 {
		t.Fatalf("backlog %d pending, %d failing, oldest %s: %v", pending, failing, oldest, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newInboxCollector(st))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		got[f.GetName()] = f.GetMetric()[0].GetGauge().GetValue()
	}
	if got["escrowd_provider_events_pending"] != 2 || got["escrowd_provider_events_failing"] != 1 {
		t.Fatalf("gauges %v", got)
	}
	var report statusReport
	if err := json.Unmarshal([]byte(raw), &report); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	pe := report.ProviderEvents
	if pe.Pending != 2 || len(pe.Failing) != 1 || pe.Failing[0].Attempts != 1 || pe.Failing[0].ID != items[0].ID {
		t.Fatalf("JSON provider events: %s", raw)
	}
}
