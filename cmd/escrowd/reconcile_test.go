package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/gateway"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/projections"
)

func TestReconcilePeriod(t *testing.T) {
	now := time.Date(2026, 12, 1, 21, 0, 0, 0, time.UTC)
	day := func(s string) time.Time { d, _ := time.Parse(time.DateOnly, s); return d }
	for _, tc := range []struct {
		from, to         string
		wantFrom, wantTo time.Time
		err              string
	}{
		{"", "", day("2026-11-30"), day("2026-12-01"), ""},
		{"2026-11-01", "", day("2026-11-01"), day("2026-11-02"), ""},
		{"2026-11-01", "2026-11-30", day("2026-11-01"), day("2026-12-01"), ""},
		{"2026-11-30", "2026-11-01", time.Time{}, time.Time{}, "--to is before --from"},
		{"yesterday", "", time.Time{}, time.Time{}, `"yesterday" is not a YYYY-MM-DD date`},
	} {
		from, to, err := reconcilePeriod(tc.from, tc.to, now)
		if tc.err != "" {
			var u usageError
			if !errors.As(err, &u) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s..%s: %v, want %q", tc.from, tc.to, err, tc.err)
			}
			continue
		}
		if err != nil || !from.Equal(tc.wantFrom) || !to.Equal(tc.wantTo) {
			t.Errorf("%s..%s: %v %v %v", tc.from, tc.to, from, to, err)
		}
	}
}

// listedTransfers is a provider listing fixed transfers; its payouts
// answer nothing (reconcile only reads references through them).
type listedTransfers struct{ list []gateway.ProviderTransfer }

func (l listedTransfers) Transfers(context.Context, time.Time, time.Time) ([]gateway.ProviderTransfer, error) {
	return l.list, nil
}

func TestReconcileReportsAndExits(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewURL(t)
	env := testEnv(t, db)
	if err := projections.CatchUp(ctx, env.Store, env.Pool, nopLogger(), env.Projectors...); err != nil {
		t.Fatal(err)
	}
	svc := app.NewService(app.NewEngine(env.Store, 100))
	q := env.queries()
	from := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	if err := reconcile(ctx, svc, q, domain.Test, from, from.AddDate(0, 0, 1), false, &out); !errors.Is(err, ErrNothingToReconcile) {
		t.Fatalf("builtin gateways: %v", err)
	}
	set := gateway.Test()
	set.Transfers = listedTransfers{}
	svc.Gateways[domain.Test] = set
	out.Reset()
	if err := reconcile(ctx, svc, q, domain.Test, from, from.AddDate(0, 0, 1), false, &out); err != nil ||
		!strings.Contains(out.String(), "0 compared, 0 healed, 0 difference(s)") {
		t.Fatalf("nothing to compare: %v\n%s", err, out.String())
	}
	set.Transfers = listedTransfers{list: []gateway.ProviderTransfer{{Reference: "TRF_ours_not", Amount: money.Naira(10),
		Answer: payment.PayoutAnswer{Status: payment.ProviderSucceeded}}}}
	svc.Gateways[domain.Test] = set
	out.Reset()
	err := reconcile(ctx, svc, q, domain.Test, from, from.AddDate(0, 0, 1), false, &out)
	if err == nil || !strings.Contains(out.String(), `missing here: TRF_ours_not: here "", provider "success"`) {
		t.Fatalf("a payout nobody here made: %v\n%s", err, out.String())
	}
}

// listedCharges is a provider listing fixed transactions, and answering
// each of them when asked (none is into a dedicated account here).
type listedCharges struct{ list []payment.ProviderCharge }

func (listedCharges) OpenDepositAccount(context.Context, gateway.DepositHolder) (string, payment.BankAccount, error) {
	return "", payment.BankAccount{}, errors.New("not here")
}
func (listedCharges) Reference(id string) string { return "ch_" + id }
func (listedCharges) Initialize(context.Context, gateway.ChargeRequest) (string, error) {
	return "", errors.New("not here")
}
func (l listedCharges) Charge(_ context.Context, ref string) (payment.ProviderCharge, error) {
	for _, pc := range l.list {
		if pc.Reference == ref {
			return pc, nil
		}
	}
	return payment.ProviderCharge{}, gateway.ErrChargeUnknown
}
func (l listedCharges) Charges(context.Context, time.Time, time.Time) ([]payment.ProviderCharge, error) {
	return l.list, nil
}

// Collections are reconciled beside payouts: a provider's transaction
// nobody here is paid by is a difference, and the exit status says so.
func TestReconcileComparesCollections(t *testing.T) {
	ctx := context.Background()
	env := testEnv(t, pgtest.NewURL(t))
	if err := projections.CatchUp(ctx, env.Store, env.Pool, nopLogger(), env.Projectors...); err != nil {
		t.Fatal(err)
	}
	svc := app.NewService(app.NewEngine(env.Store, 100))
	q := env.queries()
	from := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	set := gateway.Test()
	set.Charges = listedCharges{}
	svc.Gateways[domain.Test] = set
	var out bytes.Buffer
	if err := reconcile(ctx, svc, q, domain.Test, from, from.AddDate(0, 0, 1), false, &out); err != nil ||
		!strings.Contains(out.String(), "collections of test, 2026-11-30 to 2026-11-30: 0 compared, 0 healed, 0 difference(s)") ||
		strings.Contains(out.String(), "payouts of") {
		t.Fatalf("nothing to compare: %v\n%s", err, out.String())
	}
	set.Charges = listedCharges{list: []payment.ProviderCharge{{Reference: "T_not_ours", Status: payment.ChargeSucceeded,
		Amount: money.Naira(10), Channel: "card"}}}
	svc.Gateways[domain.Test] = set
	out.Reset()
	err := reconcile(ctx, svc, q, domain.Test, from, from.AddDate(0, 0, 1), false, &out)
	if err == nil || !strings.Contains(out.String(), `missing here: T_not_ours: here "not credited", provider "succeeded"`) {
		t.Fatalf("a transaction nobody here is paid by: %v\n%s", err, out.String())
	}
}
