package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/wiring"
	"github.com/escrowd/escrowd/projections"
)

var reconcileCommand = &command{
	name: "reconcile", args: "--env test|live [--from YYYY-MM-DD] [--to YYYY-MM-DD] [--json]",
	summary: "compare the provider's payouts of a period with the ledger (exit 1 on any difference)",
	detail: `Lists the provider's transfers of the period (default: yesterday, UTC; --to
is inclusive) and compares them with the bank withdrawals of the ledger read
model: a withdrawal still pending whose outcome the provider has is settled
now, by asking the provider, as its event would have (reported as healed);
every other difference (missing here, missing there, another amount or
outcome) is printed on one line. Collections are not compared: no payment is
collected through a provider in this build.
Exit 0: nothing left to look into; 1: a difference remains, or the
reconciliation could not run; 2: a mistake in the command line.`,
	database: true,
	required: []string{"env"},
	define: func(fs *flag.FlagSet) runFunc {
		envName := fs.String("env", "", "environment: test or live (required)")
		fromS := fs.String("from", "", "first day, YYYY-MM-DD (default yesterday)")
		toS := fs.String("to", "", "last day, YYYY-MM-DD (default the first day)")
		asJSON := fs.Bool("json", false, "print the report as JSON")
		return func(ctx context.Context, inv *invocation) error {
			env := domain.Environment(*envName)
			if !env.Valid() {
				return usageError("reconcile: --env must be test or live")
			}
			from, to, err := reconcilePeriod(*fromS, *toS, time.Now())
			if err != nil {
				return err
			}
			providers := map[domain.Environment]wiring.Provider{}
			for e, p := range inv.cfg.Providers {
				providers[e] = wiring.Provider{Name: p.Name, SecretKey: string(p.SecretKey), BaseURL: p.BaseURL, DVABank: p.DVABank}
			}
			sets, err := wiring.Gateways(providers)
			if err != nil {
				return err
			}
			// The withdrawals are read from the ledger read model: up to
			// date with the log first, as the audit does.
			if err := projections.CatchUp(ctx, inv.env.Store, inv.env.Pool, inv.env.Log, inv.env.Projectors...); err != nil {
				return err
			}
			svc := wiring.Application(inv.env.Store, inv.env.Pool, 10_000)
			svc.Gateways = sets
			return reconcile(ctx, svc, projections.NewQueries(inv.env.Pool), env, from, to, *asJSON, inv.env.Stdout)
		}
	},
}

// reconcilePeriod reads the days [from, to] into the instants [from, to+1d).
func reconcilePeriod(fromS, toS string, now time.Time) (time.Time, time.Time, error) {
	day := func(s string) (time.Time, error) {
		t, err := time.Parse(time.DateOnly, s)
		if err != nil {
			return t, usageError(fmt.Sprintf("reconcile: %q is not a YYYY-MM-DD date", s))
		}
		return t, nil
	}
	from := now.UTC().Truncate(24*time.Hour).AddDate(0, 0, -1)
	var err error
	if fromS != "" {
		if from, err = day(fromS); err != nil {
			return from, from, err
		}
	}
	to := from
	if toS != "" {
		if to, err = day(toS); err != nil {
			return from, to, err
		}
	}
	if to.Before(from) {
		return from, to, usageError("reconcile: --to is before --from")
	}
	return from, to.AddDate(0, 0, 1), nil
}

// ErrNothingToReconcile: the environment's provider lists no transfers.
var ErrNothingToReconcile = errors.New("reconcile: the environment's payment provider lists no transfers (the built-in test gateways, or none)")

// reconcile runs the comparison of [from, to) and prints it; an error
// (exit 1) when a difference remains.
func reconcile(ctx context.Context, svc *app.Service, q *projections.Queries, env domain.Environment, from, to time.Time, asJSON bool, w io.Writer) error {
	rep, err := reconcileRun(ctx, svc, q, env, from, to)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(w, "payouts of %s, %s to %s: %d compared, %d healed, %d difference(s)\n", env,
			from.Format(time.DateOnly), to.AddDate(0, 0, -1).Format(time.DateOnly), rep.Compared, len(rep.Healed), len(rep.Differences))
		for _, d := range rep.Healed {
			fmt.Fprintf(w, "healed: %s\n", d)
		}
		for _, d := range rep.Differences {
			fmt.Fprintln(w, d)
		}
	}
	if len(rep.Differences) > 0 {
		return fmt.Errorf("reconcile: %d difference(s) remain", len(rep.Differences))
	}
	return nil
}

// reconcileRun compares env's payouts of [from, to) with its provider's
// transfers, healing what the provider settled that is pending here.
func reconcileRun(ctx context.Context, svc *app.Service, q *projections.Queries, env domain.Environment, from, to time.Time) (app.PayoutReconciliation, error) {
	set := svc.Gateways[env]
	if set.Transfers == nil {
		return app.PayoutReconciliation{}, ErrNothingToReconcile
	}
	transfers, err := set.Transfers.Transfers(ctx, from, to)
	if err != nil {
		return app.PayoutReconciliation{}, fmt.Errorf("reconcile: listing the provider's transfers: %w", err)
	}
	ours, err := q.Withdrawals(ctx, env, from, to)
	if err != nil {
		return app.PayoutReconciliation{}, err
	}
	return svc.ReconcilePayouts(ctx, env, transfers, ours)
}
