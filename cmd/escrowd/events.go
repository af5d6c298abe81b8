package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
)

// cmdEvents implements `escrowd events export --merchant M [--from T]
// [--to T] [--type T1,T2] [--secrets]`: the merchant's events (those whose
// metadata names it) in commit order, one JSON object a line, for auditors
// to replay. Credentials and BVNs are redacted unless --secrets.
func cmdEvents(ctx context.Context, env *cliEnv, args []string) error {
	if len(args) == 0 {
		return usageError("events: want a subcommand: export, copy")
	}
	switch args[0] {
	case "export":
		return eventsExport(ctx, env, args[1:])
	case "copy":
		return eventsCopy(ctx, env, args[1:])
	default:
		return usageError("events: unknown subcommand " + args[0])
	}
}

// exportedEvent is one line of the export.
type exportedEvent struct {
	Position   eventstore.Position `json:"position"`
	ID         string              `json:"id"`
	Stream     string              `json:"stream"`
	Revision   uint64              `json:"revision"`
	Type       string              `json:"type"`
	Data       json.RawMessage     `json:"data"`
	Metadata   json.RawMessage     `json:"metadata"`
	RecordedAt time.Time           `json:"recordedAt"`
}

func eventsExport(ctx context.Context, env *cliEnv, args []string) error {
	fs := flag.NewFlagSet("events export", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	id := fs.String("merchant", "", "merchant id")
	fromFlag := fs.String("from", "", "only events recorded at or after this time (RFC 3339 or YYYY-MM-DD)")
	toFlag := fs.String("to", "", "only events recorded before this time (RFC 3339; YYYY-MM-DD includes that day)")
	types := fs.String("type", "", "only events of these types (comma-separated, e.g. payment.settled)")
	secrets := fs.Bool("secrets", false, "export signing secrets, key digests and full BVNs instead of redacting them")
	if err := fs.Parse(args); err != nil {
		return usageError(err.Error())
	}
	if fs.NArg() > 0 {
		return usageError("events export: unexpected argument " + fs.Arg(0))
	}
	if *id == "" {
		return usageError("events export: --merchant is required")
	}
	from, err := parseExportTime("--from", *fromFlag, false)
	if err != nil {
		return err
	}
	to, err := parseExportTime("--to", *toFlag, true)
	if err != nil {
		return err
	}
	wanted := map[string]bool{}
	for _, t := range strings.Split(*types, ",") {
		if t = strings.TrimSpace(t); t != "" {
			wanted[t] = true
		}
	}
	known, err := env.Store.ReadStream(ctx, app.MerchantKind.StreamName(*id), 0, 1)
	if err != nil {
		return err
	}
	if len(known) == 0 {
		return fmt.Errorf("events export: merchant %s not found", *id)
	}
	// The export is the log as of now: events committed while it runs are
	// left to the next export.
	head, err := env.Store.Head(ctx)
	if err != nil {
		return err
	}
	out := bufio.NewWriter(env.Stdout)
	enc := json.NewEncoder(out)
	const page = 2000
	for after := eventstore.Start; after.Less(head); {
		events, err := env.Store.ReadAll(ctx, after, page)
		if err != nil {
			return err
		}
		if len(events) == 0 {
			break
		}
		for _, re := range events {
			if head.Less(re.Position) {
				break
			}
			if len(wanted) > 0 && !wanted[re.Type] {
				continue
			}
			if (!from.IsZero() && re.RecordedAt.Before(from)) || (!to.IsZero() && !re.RecordedAt.Before(to)) {
				continue
			}
			var meta domain.Meta
			if len(re.Metadata) == 0 || json.Unmarshal(re.Metadata, &meta) != nil || meta.MerchantID != *id {
				continue
			}
			data := rawJSON(re.Data)
			if !*secrets {
				if data, err = redactData(re.Type, data); err != nil {
					return fmt.Errorf("events export: event %s: %w", re.ID, err)
				}
			}
			if err := enc.Encode(exportedEvent{Position: re.Position, ID: re.ID.String(), Stream: re.Stream, Revision: re.Revision,
				Type: re.Type, Data: data, Metadata: rawJSON(re.Metadata), RecordedAt: re.RecordedAt.UTC()}); err != nil {
				return err
			}
		}
		after = events[len(events)-1].Position
	}
	return out.Flush()
}

// rawJSON passes stored JSON through unchanged; anything else (which a
// store should never hold) is exported as a JSON string rather than
// breaking the line. The store keeps data as written, line breaks
// included; the encoder compacts a RawMessage, so each event still takes
// one line (only whitespace between tokens goes).
func rawJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	if json.Valid(b) {
		return b
	}
	s, _ := json.Marshal(string(b))
	return s
}

// parseExportTime reads an RFC 3339 time or a date (midnight UTC; as an
// upper bound, the end of that day).
func parseExportTime(flagName, s string, upper bool) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return time.Time{}, usageError(flagName + " must be an RFC 3339 time or YYYY-MM-DD")
	}
	if upper {
		t = t.AddDate(0, 0, 1)
	}
	return t, nil
}
