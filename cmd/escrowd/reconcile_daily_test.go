package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/gateway"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/projections"
)

// failingTransfers is a provider whose listing does not answer.
type failingTransfers struct{}

func (failingTransfers) Transfers(context.Context, time.Time, time.Time) ([]gateway.ProviderTransfer, error) {
	return nil, errors.New("provider down")
}

// TestDailyReconciliationExportsItsOutcome: the daily run compares the
// previous day of every environment whose provider lists transfers and
// exports what it left: a transfer nobody here made is a difference; a
// provider that does not answer counts a failure; an environment on the
// built-in gateways is not reconciled.
func TestDailyReconciliationExportsItsOutcome(t *testing.T) {
	ctx := context.Background()
	env := testEnv(t, pgtest.NewURL(t))
	if err := projections.CatchUp(ctx, env.Store, env.Pool, nopLogger(), env.Projectors...); err != nil {
		t.Fatal(err)
	}
	svc := app.NewService(app.NewEngine(env.Store, 100))
	test := gateway.Test()
	test.Transfers = listedTransfers{list: []gateway.ProviderTransfer{{Reference: "TRF_not_ours", Amount: money.Naira(10),
		Answer: payment.PayoutAnswer{Status: payment.ProviderSucceeded}}}}
	test.Charges = listedCharges{list: []payment.ProviderCharge{{Reference: "T_not_ours", Status: payment.ChargeSucceeded,
		Amount: money.Naira(10), Channel: "card"}}}
	svc.Gateways[domain.Test] = test
	svc.Gateways[domain.Live] = gateway.Set{Transfers: failingTransfers{}}
	d := newDailyReconciler(svc, env.queries(), env.Pool, nopLogger())
	d.now = func() time.Time { return time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC) }
	reg := prometheus.NewRegistry()
	reg.MustRegister(d)
	d.runOnce(ctx)

	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName() + "{" + m.GetLabel()[0].GetValue() + "}"
			if g := m.GetGauge(); g != nil {
				got[key] = g.GetValue()
			}
			if c := m.GetCounter(); c != nil {
				got[key] = c.GetValue()
			}
		}
	}
	want := map[string]float64{
		"escrowd_reconcile_differences{test}":                    1,
		"escrowd_reconcile_healed{test}":                         0,
		"escrowd_reconcile_collection_differences{test}":         1,
		"escrowd_reconcile_collections_healed{test}":             0,
		"escrowd_reconcile_last_success_timestamp_seconds{test}": float64(d.now().Unix()),
		"escrowd_reconcile_failures_total{live}":                 1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if _, ok := got["escrowd_reconcile_differences{live}"]; ok {
		t.Errorf("a failed run exported differences: %v", got)
	}
}
