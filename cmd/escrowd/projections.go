package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/inbox"
	"github.com/escrowd/escrowd/internal/wiring"
	"github.com/escrowd/escrowd/projections"
	"github.com/escrowd/escrowd/webhooks"
)

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

var projectionsStatusCommand = &command{
	name: "projections status", args: "[--json]",
	summary: "how far behind the log each read model and the webhook subscriber are",
	detail: `For each: how many events it has yet to apply, when it last applied one,
whether a process is running it, and its last error. Below the table:
committed events held back by an open transaction that appends to the log,
and the session holding them; then the payment providers' events waiting to
be processed, and each whose processing failed (retried with backoff). Safe
while servers run.
--json prints {"projectors": [...], "horizon": {...}, "providerEvents": {...}}
with the checkpoints.`,
	database: true,
	define: func(fs *flag.FlagSet) runFunc {
		asJSON := fs.Bool("json", false, "print JSON")
		return func(ctx context.Context, inv *invocation) error {
			return projectionsStatus(ctx, inv.env, *asJSON, time.Now())
		}
	},
}

func projectionsStatus(ctx context.Context, env *cliEnv, asJSON bool, now time.Time) error {
	ps := append(append([]projections.Projector(nil), env.Projectors...), wiring.Subscriber(env.Store, env.Pool))
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
	events, err := inbox.Store{Pool: env.Pool}.Status(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(statusReport{Projectors: rows, Horizon: horizon, ProviderEvents: providerEventsOf(events)})
	}
	if err := printStatusTable(env.Stdout, rows, now); err != nil {
		return err
	}
	if horizon != nil {
		printHorizon(env.Stdout, horizon.Horizon)
	}
	printProviderEvents(env.Stdout, events, now)
	return nil
}

// providerEventsStatus is the providers' inbox in `projections status
// --json`.
type providerEventsStatus struct {
	Pending       int                `json:"pending"`
	Done          int                `json:"done"`
	OldestPending *time.Time         `json:"oldestPending,omitempty"`
	Failing       []providerEventRow `json:"failing"`
}

type providerEventRow struct {
	Provider    string    `json:"provider"`
	Environment string    `json:"environment"`
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	Attempts    int       `json:"attempts"`
	LastError   string    `json:"lastError"`
	ReceivedAt  time.Time `json:"receivedAt"`
	NextAttempt time.Time `json:"nextAttempt"`
}

func providerEventsOf(s inbox.Summary) providerEventsStatus {
	out := providerEventsStatus{Pending: s.Pending, Done: s.Done, Failing: []providerEventRow{}}
	if !s.OldestPending.IsZero() {
		out.OldestPending = &s.OldestPending
	}
	for _, f := range s.Failing {
		out.Failing = append(out.Failing, providerEventRow{Provider: f.Provider, Environment: string(f.Environment), ID: f.ID,
			Name: f.Name, Attempts: f.Attempts, LastError: f.LastError, ReceivedAt: f.ReceivedAt, NextAttempt: f.DueAt})
	}
	return out
}

// printProviderEvents shows the providers' inbox: what waits, and each
// event whose processing failed (it is retried with backoff).
func printProviderEvents(w io.Writer, s inbox.Summary, now time.Time) {
	fmt.Fprintf(w, "\nProvider events: %d pending, %d processed.", s.Pending, s.Done)
	if !s.OldestPending.IsZero() {
		fmt.Fprintf(w, " Oldest pending received %s.", ago(now.Sub(s.OldestPending)))
	}
	fmt.Fprintln(w)
	for _, f := range s.Failing {
		fmt.Fprintf(w, "  failing: %s %s %s (%s), %d attempts, next %s: %s\n", f.Provider, f.Environment, f.ID, f.Name,
			f.Attempts, f.DueAt.Local().Format(time.DateTime), strings.ReplaceAll(f.LastError, "\n", " "))
	}
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
	// ProviderEvents is the inbox of payment providers' events.
	ProviderEvents providerEventsStatus `json:"providerEvents"`
}

type horizonStatus struct {
	eventstore.Horizon
	HeldForMs int64 `json:"heldForMs"`
}

// printHorizon explains the one stall the lag column cannot show: events
// committed behind an open log writer are beyond the head every projector
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
		fmt.Fprintf(w, "Held by: %s\n", h.Blocker)
		fmt.Fprintln(w, "End it (commit, roll back, or pg_terminate_backend) to let them through.")
	}
}

// printStatusTable shows each row in words: events behind, when it last
// applied one (its checkpoint's positions are in --json).
func printStatusTable(w io.Writer, st []statusRow, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tBEHIND\tLAST APPLIED\tRUNNING\tLAST ERROR")
	for _, s := range st {
		applied := "never"
		if s.UpdatedAt != nil {
			applied = s.UpdatedAt.Local().Format(time.DateTime) + " (" + ago(now.Sub(*s.UpdatedAt)) + ")"
		}
		running := "no"
		if s.Active {
			running = "yes"
		}
		lastErr := "-"
		if s.Parked != nil {
			lastErr = "PARKED at event " + s.Parked.EventID + " (" + s.Parked.EventType + " of " + s.Parked.Stream +
				"): " + s.Parked.Reason + "; escrowd projections retry|skip " + s.Name
		} else if s.LastError != "" {
			lastErr = strings.ReplaceAll(s.LastError, "\n", " ")
			if s.LastErrorAt != nil {
				lastErr = s.LastErrorAt.Local().Format(time.DateTime) + " " + lastErr
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Kind, behind(s), applied, running, lastErr)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "\nBEHIND: events in the log it has yet to apply. LAST APPLIED: when it last moved on.")
	return err
}

// behind says how far s is behind the log.
func behind(s statusRow) string {
	switch {
	case !s.Installed && s.Kind == kindSubscriber:
		return "not installed"
	case s.Lag == 0:
		return "up to date"
	case s.Lag == 1:
		return "1 event behind"
	default:
		return fmt.Sprintf("%d events behind", s.Lag)
	}
}

// ago is a duration as a person reads it: "4s ago", "3m ago", "2h ago".
func ago(d time.Duration) string {
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	default:
		return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
	}
}

var projectionsRebuildCommand = &command{
	name: "projections rebuild", args: "[NAME]",
	summary:  "rebuild read models from the log into a shadow schema and swap them in; the API keeps serving",
	database: true, positional: 1,
	define: func(fs *flag.FlagSet) runFunc {
		return func(ctx context.Context, inv *invocation) error {
			return projectionsRebuild(ctx, inv.env, inv.args)
		}
	},
}

func init() {
	var names []string
	for _, p := range projections.All(nil) {
		names = append(names, p.Name())
	}
	projectionsRebuildCommand.detail = "NAME is one read model: " + strings.Join(names, ", ") + `.
Without NAME, all of them from one pass over the log, written at once.
Never ` + webhooks.SubscriberName + `: the webhook subscriber is not a read model, and
replaying the log would send every webhook again.
A progress bar with the time left is drawn on stderr when it is a terminal.`
}

func projectionsRebuild(ctx context.Context, env *cliEnv, args []string) error {
	name := ""
	if len(args) > 0 {
		name = args[0]
	}
	targets := env.Projectors
	if name == webhooks.SubscriberName {
		return fmt.Errorf("projections rebuild: %q is the webhook subscriber, not a read model, and cannot be rebuilt: "+
			"replaying the event log would send every webhook again. Its checkpoint only moves forward; "+
			"`projections status` shows its lag, and a merchant retries a single delivery with "+
			"POST /v1/merchant/webhook/deliveries/{id}/retry", name)
	}
	if name != "" {
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
	// One pass over the log for all of them (projections.RebuildAll).
	began := time.Now()
	label := "rebuild " + targets[0].Name()
	if len(targets) > 1 {
		label = fmt.Sprintf("rebuild %d read models", len(targets))
	}
	var (
		progress *eventProgress
		events   int64
	)
	report := func(done, total int64) { events = done }
	if isTerminal(env.Stderr) {
		progress = newEventProgress(env.Stderr, label)
		report = func(done, total int64) { events = done; progress.update(done, total) }
	}
	err := projections.RebuildAll(ctx, env.Pool, env.Store, targets, env.Log, report)
	if progress != nil {
		progress.finish(err)
	}
	if err != nil {
		return err
	}
	took := time.Since(began)
	for _, p := range targets {
		fmt.Fprintf(env.Stdout, "rebuilt %s in %s\n", p.Name(), took.Round(time.Millisecond))
	}
	fmt.Fprintf(env.Stdout, "%d events read once, %.0f events/s\n", events, float64(events)/max(took.Seconds(), 1e-3))
	return nil
}
