// Parked events: `projections retry` and `projections skip`.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/projections"
)

var projectionsRetryCommand = &command{
	name: "projections retry", args: "NAME",
	summary: "let a read model apply again the event it parked (after a fix)",
	detail: `A projector that fails on one event three times in a row parks it: it stops
before the event, its reads answer 503 naming it, and nothing else waits for
it. Once the cause is fixed (a new build, the data it writes), retry clears
the parked event and the running projector applies it again; if it fails
again three times, it parks it again. Safe while servers run.`,
	database: true, positional: 1,
	define: func(fs *flag.FlagSet) runFunc {
		return func(ctx context.Context, inv *invocation) error {
			return unparkCommand(ctx, inv, projections.Retry, "retrying")
		}
	},
}

var projectionsSkipCommand = &command{
	name: "projections skip", args: "NAME",
	summary: "move a read model past the event it parked; it never applies that event",
	detail: `The projector's checkpoint moves past its parked event and the projector goes
on with the events after it: its read models will never include that event
(a rebuild applies it again, and fails on it again unless it was fixed).
The event itself stays in the log; the audit still replays it. Safe while
servers run.`,
	database: true, positional: 1,
	define: func(fs *flag.FlagSet) runFunc {
		return func(ctx context.Context, inv *invocation) error {
			return unparkCommand(ctx, inv, projections.Skip, "skipped")
		}
	},
}

func unparkCommand(ctx context.Context, inv *invocation, unpark func(context.Context, *pgxpool.Pool, string) (projections.Parked, error), done string) error {
	if len(inv.args) != 1 {
		return usageError("name the read model (see escrowd projections status)")
	}
	name := inv.args[0]
	known := false
	for _, p := range inv.env.Projectors {
		known = known || p.Name() == name
	}
	if !known {
		return usageError("no read model named " + name + " (see escrowd projections status)")
	}
	pk, err := unpark(ctx, inv.env.Pool, name)
	if errors.Is(err, projections.ErrNotParked) {
		return fmt.Errorf("%s has parked no event", name)
	}
	if err != nil {
		return err
	}
	inv.env.Log.Info("projections: parked event cleared by the operator", zap.String("projection", name),
		zap.String("action", done), zap.String("event", pk.EventID), zap.String("type", pk.EventType))
	_, err = fmt.Fprintf(inv.env.Stdout, "%s: %s event %s (%s of %s at %s), which failed with: %s\n",
		name, done, pk.EventID, pk.EventType, pk.Stream, pk.Position, pk.Reason)
	return err
}
