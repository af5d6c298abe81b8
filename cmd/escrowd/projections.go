package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/projections"
	"github.com/escrowd/escrowd/webhooks"
)

// cmdProjections implements `escrowd projections status [--json]` and
// `escrowd projections rebuild [NAME]`. Both are safe while servers run.
func cmdProjections(ctx context.Context, env *cliEnv, args []string) error {
	if len(args) == 0 {
		return usageError("projections: want a subcommand: status or rebuild")
	}
	switch args[0] {
	case "status":
		return projectionsStatus(ctx, env, args[1:])
	case "rebuild":
		return projectionsRebuild(ctx, env, args[1:])
	default:
		return usageError("projections: unknown subcommand " + args[0])
	}
}

// Kinds of checkpoint `projections status` shows.
const (
	kindReadModel  = "read model"
	kindSubscriber = "webhook subscriber"
)

// statusRow is one line of `projections status`: a projector's status and
// what it is. The webhook subscriber has a checkpoint and a lag like a read
// model, but `projections rebuild` refuses it.
type statusRow struct {
	projections.ProjectorStatus
	Kind        string `json:"kind"`
	Rebuildable bool   `json:"rebuildable"`
	// Installed is false when the checkpoint does not exist yet (a read
	// model never run; webhooks never turned on): the lag then counts the
	// whole log.
	Installed bool `json:"installed"`
}

func projectionsStatus(ctx context.Context, env *cliEnv, args []string) error {
	fs := flag.NewFlagSet("projections status", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return usageError(err.Error())
	}
	if fs.NArg() > 0 {
		return usageError("projections status: unexpected argument " + fs.Arg(0))
	}
	ps := append(append([]projections.Projector(nil), env.Projectors...), webhooks.NewSubscriber(env.Store, env.Pool))
	st, err := projections.Status(ctx, env.Pool, env.Store, ps...)
	if err != nil {
		return err
	}
	rows := make([]statusRow, len(st))
	for i, s := range st {
		rows[i] = statusRow{ProjectorStatus: s, Kind: kindReadModel, Rebuildable: true, Installed: s.UpdatedAt != nil}
		if s.Name == webhooks.SubscriberName {
			rows[i].Kind, rows[i].Rebuildable = kindSubscriber, false
		}
	}
	var horizon *horizonStatus
	if hr, ok := env.Store.(eventstore.HorizonReporter); ok {
		h, err := hr.Horizon(ctx, horizonCountLimit, horizonExplainAfter)
		if err != nil {
			return err
		}
		horizon = &horizonStatus{Horizon: h, HeldForMs: h.HeldFor.Milliseconds()}
	}
	if *asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(statusReport{Projectors: rows, Horizon: horizon})
	}
	if err := printStatusTable(env.Stdout, rows); err != nil {
		return err
	}
	if horizon != nil {
		printHorizon(env.Stdout, horizon.Horizon)
	}
	return nil
}

// What `projections status` counts and explains of the store's horizon: a
// held event that waited half a second is not a normal commit race.
const (
	horizonCountLimit   = 100000
	horizonExplainAfter = 500 * time.Millisecond
)

// statusReport is `projections status --json`.
type statusReport struct {
	Projectors []statusRow `json:"projectors"`
	// Horizon is absent for a store without one (KurrentDB).
	Horizon *horizonStatus `json:"horizon,omitempty"`
}

type horizonStatus struct {
	eventstore.Horizon
	HeldForMs int64 `json:"heldForMs"`
}

// printHorizon explains the one stall the lag column cannot show: events
// committed behind an open transaction are beyond the head every projector
// counts up to.
func printHorizon(w io.Writer, h eventstore.Horizon) {
	if h.Held == 0 {
		fmt.Fprintln(w, "\nHorizon: no committed event is held back.")
		return
	}
	more := ""
	if h.Held >= horizonCountLimit {
		more = " or more"
	}
	fmt.Fprintf(w, "\nHorizon: %d%s committed events held back for %s, behind every projector and the webhook subscriber.\n",
		h.Held, more, h.HeldFor.Round(time.Millisecond))
	if h.Blocker != "" {
		fmt.Fprintf(w, "Oldest open transaction: %s\n", h.Blocker)
		fmt.Fprintln(w, "End it (commit, roll back, or pg_terminate_backend) to let them through.")
	}
}

func printStatusTable(w io.Writer, st []statusRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tCHECKPOINT\tHEAD\tLAG\tACTIVE\tUPDATED\tLAST ERROR")
	for _, s := range st {
		updated := "never"
		if s.UpdatedAt != nil {
			updated = s.UpdatedAt.Local().Format(time.DateTime)
		}
		active := "no"
		if s.Active {
			active = "yes"
		}
		lastErr := "-"
		if s.LastError != "" {
			lastErr = strings.ReplaceAll(s.LastError, "\n", " ")
			if s.LastErrorAt != nil {
				lastErr = s.LastErrorAt.Local().Format(time.DateTime) + " " + lastErr
			}
		}
		checkpoint, lag := s.Checkpoint.String(), strconv.FormatInt(s.Lag, 10)
		if !s.Installed && s.Kind == kindSubscriber {
			checkpoint, lag = "not installed", "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Kind, checkpoint, s.Head, lag, active, updated, lastErr)
	}
	return tw.Flush()
}

func projectionsRebuild(ctx context.Context, env *cliEnv, args []string) error {
	fs := flag.NewFlagSet("projections rebuild", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	if err := fs.Parse(args); err != nil {
		return usageError(err.Error())
	}
	if fs.NArg() > 1 {
		return usageError("projections rebuild: at most one projection name")
	}
	targets := env.Projectors
	if name := fs.Arg(0); name == webhooks.SubscriberName {
		return fmt.Errorf("projections rebuild: %q is the webhook subscriber, not a read model, and cannot be rebuilt: "+
			"replaying the event log would send every webhook again. Its checkpoint only moves forward; "+
			"`projections status` shows its lag, and a merchant retries a single delivery with "+
			"POST /v1/merchant/webhook/deliveries/{id}/retry", name)
	}
	if name := fs.Arg(0); name != "" {
		targets = nil
		var names []string
		for _, p := range env.Projectors {
			names = append(names, p.Name())
			if p.Name() == name {
				targets = append(targets, p)
			}
		}
		if len(targets) == 0 {
			return usageError(fmt.Sprintf("projections rebuild: unknown projection %q (known: %s)", name, strings.Join(names, ", ")))
		}
	}
	for _, p := range targets {
		began := time.Now()
		progress := newEventProgress(env.Stderr, "rebuild "+p.Name())
		err := projections.Rebuild(ctx, env.Pool, env.Store, p, env.Log, progress.update)
		progress.finish(err)
		if err != nil {
			return fmt.Errorf("rebuild %s: %w", p.Name(), err)
		}
		fmt.Fprintf(env.Stdout, "rebuilt %s in %s\n", p.Name(), time.Since(began).Round(time.Millisecond))
	}
	return nil
}
