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
	summary: "compare the provider's payouts and collections of a period with the ledger (exit 1 on any difference)",
	detail: `Lists the provider's transfers of the period (default: yesterday, UTC; --to
is inclusive) and compares them with the bank withdrawals of the ledger read
model: a withdrawal still pending whose outcome the provider has is settled
now, by asking the provider, as its event would have (reported as healed);
every other difference (missing here, missing there, another amount or
outcome) is printed on one line. Then the same for collections: the
provider's transactions of the period against the deposits and escrow
payments they settled here; a successful transaction not yet credited is
credited now through the exactly-once path (healed); a credit here the
provider does not list is missing there.
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
			return reconcile(ctx, svc, inv.env.queries(), env, from, to, *asJSON, inv.env.Stdout)
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

// ErrNothingToReconcile: the environment's provider lists nothing.
var ErrNothingToReconcile = errors.New("reconcile: the environment's payment provider lists no transfers or transactions (the built-in test gateways, or none)")

// reconciliation is what one run found: payouts (at the top level, as
// the report has always been) and collections.
type reconciliation struct {
	app.PayoutReconciliation
	Collections *app.PayoutReconciliation `json:"collections,omitempty"`
	payouts     bool
}

func (r reconciliation) differences() int {
	n := len(r.Differences)
	if r.Collections != nil {
		n += len(r.Collections.Differences)
	}
	return n
}

func (r reconciliation) healed() int {
	n := len(r.Healed)
	if r.Collections != nil {
		n += len(r.Collections.Healed)
	}
	return n
}

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
		print := func(what string, r app.PayoutReconciliation) {
			fmt.Fprintf(w, "%s of %s, %s to %s: %d compared, %d healed, %d difference(s)\n", what, env,
				from.Format(time.DateOnly), to.AddDate(0, 0, -1).Format(time.DateOnly), r.Compared, len(r.Healed), len(r.Differences))
			for _, d := range r.Healed {
				fmt.Fprintf(w, "healed: %s\n", d)
			}
			for _, d := range r.Differences {
				fmt.Fprintln(w, d)
			}
		}
		if rep.payouts {
			print("payouts", rep.PayoutReconciliation)
		}
		if rep.Collections != nil {
			print("collections", *rep.Collections)
		}
	}
	if n := rep.differences(); n > 0 {
		return fmt.Errorf("reconcile: %d difference(s) remain", n)
	}
	return nil
}

// reconcileRun compares env's payouts of [from, to) with its provider's
// transfers, and its collections with the provider's transactions,
// healing what the provider settled that is pending or missing here.
func reconcileRun(ctx context.Context, svc *app.Service, q *projections.Queries, env domain.Environment, from, to time.Time) (reconciliation, error) {
	out := reconciliation{PayoutReconciliation: app.PayoutReconciliation{Healed: []app.PayoutDifference{}, Differences: []app.PayoutDifference{}}}
	set := svc.Gateways[env]
	if set.Transfers == nil && set.Charges == nil {
		return out, ErrNothingToReconcile
	}
	if set.Transfers != nil {
		transfers, err := set.Transfers.Transfers(ctx, from, to)
		if err != nil {
			return out, fmt.Errorf("reconcile: listing the provider's transfers: %w", err)
		}
		ours, err := q.Withdrawals(ctx, env, from, to)
		if err != nil {
			return out, err
		}
		if out.PayoutReconciliation, err = svc.ReconcilePayouts(ctx, env, transfers, ours); err != nil {
			return out, err
		}
		out.payouts = true
	}
	if set.Charges != nil {
		charges, err := set.Charges.Charges(ctx, from, to)
		if err != nil {
			return out, fmt.Errorf("reconcile: listing the provider's transactions: %w", err)
		}
		ours, err := q.Collected(ctx, env, from, to)
		if err != nil {
			return out, err
		}
		rep, err := svc.ReconcileCharges(ctx, env, charges, ours)
		if err != nil {
			return out, err
		}
		out.Collections = &rep
	}
	return out, nil
}
