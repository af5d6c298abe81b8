// Held payouts: `payouts held` and `payouts resolve`.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/wiring"
	"github.com/escrowd/escrowd/projections"
)

var payoutsHeldCommand = &command{
	name: "payouts held", args: "[--older-than DURATION] [--json]",
	summary: "list withdrawals debited and not paid out that the payout resumer cannot finish, and why",
	detail: `Lists every withdrawal debited more than --older-than ago (default one minute,
the payout lease) that is still paying out, oldest first, with why: the
customer is blocked or may no longer withdraw, no payout provider is
configured, the provider has not answered, it was never sent, or the provider
accepted it and has not said how it ended. A withdrawal whose payout is being
sent right now is left out. Resolve one with escrowd payouts resolve.`,
	database: true,
	define: func(fs *flag.FlagSet) runFunc {
		olderThan := fs.Duration("older-than", payment.PayoutLease, "list withdrawals debited at least this long ago")
		asJSON := fs.Bool("json", false, "print the list as JSON")
		return func(ctx context.Context, inv *invocation) error {
			if *olderThan < 0 {
				return usageError("payouts held: --older-than must not be negative")
			}
			svc, err := payoutService(ctx, inv)
			if err != nil {
				return err
			}
			before := time.Now().Add(-*olderThan)
			held, err := svc.HeldPayouts(ctx, payoutsInFlight(inv.env.queries()), before)
			if err != nil {
				return err
			}
			return printHeld(inv, held, *asJSON)
		}
	},
}

// heldLine is a held withdrawal as `payouts held --json` prints it.
type heldLine struct {
	ID          string    `json:"id"`
	MerchantID  string    `json:"merchantId"`
	Environment string    `json:"environment"`
	Reference   string    `json:"reference"`
	CustomerID  string    `json:"customerId"`
	Amount      string    `json:"amount"`
	DebitedAt   time.Time `json:"debitedAt"`
	Hold        string    `json:"hold"`
	Why         string    `json:"why"`
}

func printHeld(inv *invocation, held []app.HeldPayout, asJSON bool) error {
	lines := make([]heldLine, len(held))
	for i, h := range held {
		lines[i] = heldLine{ID: h.Record.ID, MerchantID: h.MerchantID, Environment: string(h.Environment), Reference: h.Reference,
			CustomerID: h.Record.CustomerID, Amount: h.Record.Amount.String(), DebitedAt: h.DebitedAt.UTC(),
			Hold: string(h.Hold), Why: h.Hold.Explain()}
	}
	if asJSON {
		enc := json.NewEncoder(inv.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(lines)
	}
	if len(lines) == 0 {
		fmt.Fprintln(inv.stdout, "No withdrawal is held.")
		return nil
	}
	for _, l := range lines {
		fmt.Fprintf(inv.stdout, "%s  merchant %s %s  reference %q  %s  debited %s  %s: %s\n",
			l.ID, l.MerchantID, l.Environment, l.Reference, l.Amount, l.DebitedAt.Format(time.RFC3339), l.Hold, l.Why)
	}
	return nil
}

var payoutsResolveCommand = &command{
	name: "payouts resolve", args: "ID --retry|--return",
	summary: "retry a held withdrawal now, or return its money to the customer's wallet",
	detail: `ID is the withdrawal's id (escrowd payouts held lists them).
--retry sends it now, whatever holds the payout resumer back (a blocked
customer included: you decide it is to be paid); one the provider accepted is
asked where it stands instead.
--return asks the provider first: a payout it paid stays paid, one it failed or
reversed returns as it says, one it has pending is refused; one it has no
record of returns its whole debit, fee included, to the customer's wallet,
once (status failed). Each is recorded as an event whose actor is the operator.
Exit 1 when it is refused (settled already, being sent right now, the provider
not answering).`,
	database: true, positional: 1,
	define: func(fs *flag.FlagSet) runFunc {
		retry := fs.Bool("retry", false, "send the payout now (or ask the provider where an accepted one stands)")
		ret := fs.Bool("return", false, "return the withdrawal's money to the customer's wallet")
		return func(ctx context.Context, inv *invocation) error {
			if len(inv.args) != 1 {
				return usageError("payouts resolve: name the withdrawal's id (see escrowd payouts held)")
			}
			if *retry == *ret {
				return usageError("payouts resolve: give exactly one of --retry and --return")
			}
			id := inv.args[0]
			merchantID, env, ref, typ, err := inv.env.queries().TransactionKey(ctx, id)
			if errors.Is(err, projections.ErrNoSuchTransaction) || (err == nil && typ != ledger.Withdrawal) {
				return fmt.Errorf("payouts resolve: no withdrawal has the id %s", id)
			}
			if err != nil {
				return err
			}
			svc, err := payoutService(ctx, inv)
			if err != nil {
				return err
			}
			resolve := svc.RetryPayout
			if *ret {
				resolve = svc.ReturnPayout
			}
			rec, pos, err := resolve(ctx, merchantID, env, ref)
			if perr := publish(ctx, inv.env, pos); err == nil {
				err = perr
			}
			if err != nil {
				return fmt.Errorf("payouts resolve %s: %w", id, err)
			}
			fmt.Fprintf(inv.stdout, "%s: %s\n", id, resolvedAs(rec))
			return nil
		}
	},
}

// resolvedAs says where a resolved withdrawal stands.
func resolvedAs(rec ledger.Record) string {
	switch rec.Status {
	case ledger.Success:
		return "paid out (status success)"
	case ledger.Failed, ledger.Reversed:
		return fmt.Sprintf("%s and fee %s returned to the customer's wallet (status %s)", rec.Amount, rec.Fee, rec.Status)
	}
	return fmt.Sprintf("still paying out (status %s): the provider's outcome settles it", rec.Status)
}

// payoutService is the application over the command's database with the
// configured providers' gateways, the read models caught up with the log
// (the held withdrawals and their ids are read there).
func payoutService(ctx context.Context, inv *invocation) (*app.Service, error) {
	providers := map[domain.Environment]wiring.Provider{}
	for e, p := range inv.cfg.Providers {
		providers[e] = wiring.Provider{Name: p.Name, SecretKey: string(p.SecretKey), BaseURL: p.BaseURL, DVABank: p.DVABank}
	}
	sets, err := wiring.Gateways(providers)
	if err != nil {
		return nil, err
	}
	if err := projections.CatchUp(ctx, inv.env.Store, inv.env.Pool, inv.env.Log, inv.env.Projectors...); err != nil {
		return nil, err
	}
	svc := wiring.Application(inv.env.Store, inv.env.Pool, 1000)
	svc.Gateways = sets
	return svc, nil
}
