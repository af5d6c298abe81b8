package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"golang.org/x/term"

	"github.com/escrowd/escrowd/internal/audit"
)

var auditCommand = &command{
	name: "audit", args: "--merchant M [--json]",
	summary: "replay a merchant's events and check its money (exit 1 on any difference)",
	detail: `Checks: balanced movements, no negative balance (except external clearing),
records settle once, commission once per escrow; the read models (balances,
transaction records) and the customers' wallets must equal the replay.
The merchant's events are read and checked a page at a time: memory grows
with the accounts its money touches, not with its history.
Exit 0: clean; 1: a difference (each printed on one line) or the audit could
not run; 2: a mistake in the command line. A progress bar is drawn on stderr
when it is a terminal.`,
	database: true,
	required: []string{"merchant"},
	define: func(fs *flag.FlagSet) runFunc {
		id := fs.String("merchant", "", "merchant id (required)")
		asJSON := fs.Bool("json", false, "print the report as JSON")
		return func(ctx context.Context, inv *invocation) error {
			return runAudit(ctx, inv.env, *id, *asJSON)
		}
	},
}

// runAudit replays the merchant's events, checks the merchant's money and compares it
// with the read models. It returns an error (exit code 1) when there is any
// difference; the report is printed either way.
func runAudit(ctx context.Context, env *cliEnv, id string, asJSON bool) error {
	opts := audit.Options{Log: env.Log}
	var progress *eventProgress
	if isTerminal(env.Stderr) {
		progress = newEventProgress(env.Stderr, "audit replay")
		opts.Progress = progress.update
	}
	rep, err := audit.RunWith(ctx, env.Store, env.Pool, id, opts)
	if progress != nil {
		progress.finish(err)
	}
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else if err := printAudit(env.Stdout, rep); err != nil {
		return err
	}
	if !rep.Clean() {
		return fmt.Errorf("audit: %d difference(s) for merchant %s", len(rep.Differences), rep.MerchantID)
	}
	return nil
}

func printAudit(w io.Writer, rep audit.Report) error {
	fmt.Fprintf(w, "audit of merchant %s, log replayed up to %s (amounts in naira)\n", rep.MerchantID, rep.Position)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, row := range []struct {
		name string
		n    int64
	}{
		{"events replayed", rep.Events},
		{"ledger entries", rep.Entries},
		{"movements", rep.Movements},
		{"records", int64(rep.Records)},
		{"accounts", int64(rep.Accounts)},
		{"wallets", int64(rep.Wallets)},
		{"differences", int64(len(rep.Differences))},
	} {
		fmt.Fprintf(tw, "  %s\t%d\n", row.name, row.n)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if rep.Clean() {
		_, err := fmt.Fprintln(w, "clean: the log, the read models and the wallets agree")
		return err
	}
	for _, d := range rep.Differences {
		if _, err := fmt.Fprintln(w, d.String()); err != nil {
			return err
		}
	}
	return nil
}

// isTerminal reports whether w is a terminal (progress bars only go there).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
