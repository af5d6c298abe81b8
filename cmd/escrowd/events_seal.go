package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/audit"
	"github.com/escrowd/escrowd/internal/sealing"
)

var eventsSealCommand = &command{
	name: "events seal", args: "--i-have-a-backup",
	summary: "seal the personal and secret fields of events written before sealing (rewrites them in place)",
	detail: "Events written by a version that kept secrets and personal data in plain text are rewritten:\n" +
		"each declared personal or secret field is replaced by its sealed value, and the streams named\n" +
		"by a customer's email or phone or by a bank account are renamed by its blind index. Nothing\n" +
		"else of an event changes (ids, positions, amounts, references, times), so read models and\n" +
		"checkpoints stay valid. It is the one command that rewrites history: take a backup of the database first,\n" +
		"stop every escrowd process, and keep the backup as safe as the data it holds. The audit of\n" +
		"every merchant must be clean before (else nothing is rewritten) and is run again after.\n" +
		"Running it again rewrites only what is still plain. The PostgreSQL event store only.",
	database: true,
	define: func(fs *flag.FlagSet) runFunc {
		backup := fs.Bool("i-have-a-backup", false, "confirm a backup of the database was taken (required)")
		return func(ctx context.Context, inv *invocation) error {
			if !*backup {
				return usageError("events seal rewrites events in place: take a backup of the database, then run it with --i-have-a-backup")
			}
			return eventsSeal(ctx, inv.env)
		}
	},
}

func eventsSeal(ctx context.Context, env *cliEnv) error {
	if _, ok := env.Raw.(*postgres.Store); !ok {
		return errors.New("events seal: the event log to rewrite is the PostgreSQL event store: run it with ESCROW_EVENT_STORE=postgres")
	}
	merchants, err := auditAll(ctx, env, "before")
	if err != nil {
		return err
	}
	events, err := sealStoredEvents(ctx, env)
	if err != nil {
		return fmt.Errorf("sealed %d events, then: %w", events, err)
	}
	streams, err := renameReservations(ctx, env)
	if err != nil {
		return fmt.Errorf("sealed %d events and renamed %d reservations, then: %w", events, streams, err)
	}
	accounts, err := renameAccountStreams(ctx, env)
	if err != nil {
		return fmt.Errorf("sealed %d events, renamed %d reservations and %d account streams, then: %w", events, streams, accounts, err)
	}
	// Snapshots are caches of folded states: the plain ones go.
	if _, err := env.Pool.Exec(ctx, `DELETE FROM es_snapshots`); err != nil {
		return err
	}
	if _, err := auditAll(ctx, env, "after"); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "sealed %d events, renamed %d reservations and %d account streams by blind index; the audit of %d merchants is clean\n", events, streams, accounts, merchants)
	return nil
}

// auditAll audits every merchant, an error on the first difference.
func auditAll(ctx context.Context, env *cliEnv, when string) (int, error) {
	rows, err := env.Pool.Query(ctx, `SELECT substr(stream_id, length('merchant-') + 1) FROM es_events WHERE event_type = 'merchant.created' ORDER BY tx_id, seq`)
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	for _, id := range ids {
		rep, err := audit.Run(ctx, env.Store, env.Pool, id)
		if err != nil {
			return 0, fmt.Errorf("audit of merchant %s %s sealing: %w", id, when, err)
		}
		if !rep.Clean() {
			return 0, fmt.Errorf("the audit of merchant %s %s sealing is not clean (%d differences): run escrowd audit --merchant %s", id, when, len(rep.Differences), id)
		}
	}
	return len(ids), nil
}

// sealStoredEvents rewrites the events whose declared fields are plain, a
// page per transaction.
func sealStoredEvents(ctx context.Context, env *cliEnv) (int, error) {
	const page = 500
	n := 0
	var afterTx string
	var afterSeq int64
	for {
		type row struct {
			id          string
			stream, typ string
			data, meta  []byte
			tx          string
			seq         int64
		}
		rows, err := env.Pool.Query(ctx, `SELECT event_id::text, stream_id, event_type, data::text, metadata::text, tx_id::text, seq FROM es_events
			WHERE ($1 = '' OR (tx_id, seq) > ($1::xid8, $2)) ORDER BY tx_id, seq LIMIT $3`, afterTx, afterSeq, page)
		if err != nil {
			return n, err
		}
		found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var x row
			var meta *string
			var data string
			err := r.Scan(&x.id, &x.stream, &x.typ, &data, &meta, &x.tx, &x.seq)
			x.data = []byte(data)
			if meta != nil {
				x.meta = []byte(*meta)
			}
			return x, err
		})
		if err != nil {
			return n, err
		}
		if len(found) == 0 {
			return n, nil
		}
		err = pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
			for _, x := range found {
				sealed, err := sealing.SealEvent(ctx, env.Keyring, x.stream, x.typ, x.data, x.meta)
				if err != nil {
					return err
				}
				if bytes.Equal(sealed, x.data) {
					continue
				}
				if _, err := tx.Exec(ctx, `UPDATE es_events SET data = $2::json WHERE event_id = $1::uuid`, x.id, string(sealed)); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		if err != nil {
			return n, err
		}
		last := found[len(found)-1]
		afterTx, afterSeq = last.tx, last.seq
	}
}

// renameReservations renames the reservation streams named by a plain
// email or phone after the value's blind index, as the application names
// them.
func renameReservations(ctx context.Context, env *cliEnv) (int, error) {
	names, err := streamNames(ctx, env, `stream_id LIKE 'reservation-%:email:%' OR stream_id LIKE 'reservation-%:phone:%'`)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		parts := strings.SplitN(strings.TrimPrefix(name, "reservation-"), ":", 4)
		if len(parts) != 4 || (parts[2] != "email" && parts[2] != "phone") || blindIndexed(parts[3]) {
			continue
		}
		idx, err := env.Keyring.BlindIndex(ctx, parts[2], parts[3])
		if err != nil {
			return n, err
		}
		renamed := "reservation-" + strings.Join(parts[:3], ":") + ":" + idx
		if err := renameStream(ctx, env, name, renamed); err != nil {
			return n, fmt.Errorf("renaming reservation %s (a customer made since holds the same value?): %w", name, err)
		}
		n++
	}
	return n, nil
}

// renameAccountStreams renames the streams named by a bank account, as an
// earlier version named them, after the account's blind index, as the
// application names them: a dedicated account's link to its holder (named
// by the plain number) and a payout destination's recipient (named by an
// unkeyed hash, which trying every number reverses).
func renameAccountStreams(ctx context.Context, env *cliEnv) (int, error) {
	names, err := streamNames(ctx, env, `stream_id LIKE 'accountlink-%' OR stream_id LIKE 'recipient-%'`)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		kind, id, _ := strings.Cut(name, "-")
		environment, value, ok := strings.Cut(id, ".")
		if !ok || blindIndexed(value) {
			continue
		}
		var purpose, renamed string
		switch kind {
		case app.AccountLinkKind.Name:
			purpose = app.AccountPurpose
		case app.RecipientKind.Name:
			// The account is in the registration; the name cannot be reversed.
			events, err := env.Store.ReadStream(ctx, name, 0, 1)
			if err != nil {
				return n, err
			}
			var reg payment.RecipientRegistered
			if len(events) != 1 || json.Unmarshal(events[0].Data, &reg) != nil || reg.AccountNumber == "" {
				return n, fmt.Errorf("recipient stream %s holds no registration of an account", name)
			}
			purpose, value = app.RecipientPurpose, payment.RecipientKey(reg.BankCode, reg.AccountNumber)
		default:
			continue
		}
		idx, err := env.Keyring.BlindIndex(ctx, purpose, value)
		if err != nil {
			return n, err
		}
		renamed = kind + "-" + environment + "." + idx
		if err := renameStream(ctx, env, name, renamed); err != nil {
			return n, fmt.Errorf("renaming %s (one of the same account written since?): %w", name, err)
		}
		n++
	}
	return n, nil
}

// namedByPlainValue is a stream of the PostgreSQL event log that an
// earlier version named by a personal value events seal renames ("" when
// there is none, or the log is another store's).
func namedByPlainValue(ctx context.Context, env *cliEnv) (string, error) {
	if _, ok := env.Raw.(*postgres.Store); !ok {
		return "", nil
	}
	var name string
	err := env.Pool.QueryRow(ctx, `SELECT stream_id FROM es_streams
		WHERE (stream_id ~ '^(accountlink|recipient)-' AND stream_id !~ '\.[0-9a-f]{64}$')
		   OR (stream_id ~ '^reservation-[^:]*:[^:]*:(email|phone):' AND stream_id !~ ':[0-9a-f]{64}$')
		LIMIT 1`).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return name, err
}

// streamNames are the names of the log's streams that match where.
func streamNames(ctx context.Context, env *cliEnv, where string) ([]string, error) {
	rows, err := env.Pool.Query(ctx, `SELECT stream_id FROM es_streams WHERE `+where)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// renameStream renames a stream and its events in one transaction.
func renameStream(ctx context.Context, env *cliEnv, from, to string) error {
	return pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE es_streams SET stream_id = $2 WHERE stream_id = $1`, from, to); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE es_events SET stream_id = $2 WHERE stream_id = $1`, from, to)
		return err
	})
}

// blindIndexed reports whether v is a blind index (hex of 32 bytes), not
// an email or a phone.
func blindIndexed(v string) bool {
	_, err := hex.DecodeString(v)
	return len(v) == 64 && err == nil
}
