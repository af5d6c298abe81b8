// Package inbox keeps payment providers' inbound events durably before they
// are acknowledged, and hands each to a handler after, once per event
// identity, from any number of processes (worker.go).
package inbox

import (
	"context"
	"errors"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/domain"
)

// Event is a provider's event as received: its identity (the same event
// delivered again has the same Provider, Environment and ID), its name and
// its raw body, kept as signed.
type Event struct {
	Provider    string
	Environment domain.Environment
	ID          string
	Name        string
	Body        []byte
}

// Item is an event claimed for processing.
type Item struct {
	Event
	// Attempt is this processing's number, from 1.
	Attempt int
}

// Store is the inbox over PostgreSQL (the provider_inbox table).
type Store struct{ Pool *pgxpool.Pool }

// Put keeps ev, or counts one more delivery of it when it is kept
// already; fresh says it was new. It returns once the row is committed,
// so that a 200 sent after it never loses the event.
func (s Store) Put(ctx context.Context, ev Event) (fresh bool, err error) {
	var inserted bool
	err = s.Pool.QueryRow(ctx, `
INSERT INTO provider_inbox (provider, environment, event_id, name, body)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (provider, environment, event_id) DO UPDATE SET deliveries = provider_inbox.deliveries + 1
RETURNING xmax = 0`, ev.Provider, string(ev.Environment), ev.ID, ev.Name, ev.Body).Scan(&inserted)
	return inserted, err
}

// Every time the inbox keeps (when an event is due, when it was
// processed) is the database's clock, never a process's: processes whose
// clocks disagree still see one lease end at one moment, so none takes an
// event another still holds.

// Claim takes up to n due events for lease: each becomes due again only
// when the lease ends, so a process that dies mid-event leaves it to
// another. Rows other processes are claiming are skipped, not waited for.
func (s Store) Claim(ctx context.Context, n int, lease time.Duration) ([]Item, error) {
	rows, err := s.Pool.Query(ctx, `
UPDATE provider_inbox i SET due_at = now() + $2::interval, attempts = i.attempts + 1
FROM (
    SELECT provider, environment, event_id FROM provider_inbox
    WHERE state = 'pending' AND due_at <= now()
    ORDER BY due_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
) due
WHERE i.provider = due.provider AND i.environment = due.environment AND i.event_id = due.event_id
RETURNING i.provider, i.environment, i.event_id, i.name, i.body, i.attempts`, n, lease)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Item, error) {
		var it Item
		var env string
		err := r.Scan(&it.Provider, &env, &it.ID, &it.Name, &it.Body, &it.Attempt)
		it.Environment = domain.Environment(env)
		return it, err
	})
}

// Processed is an event processed, and how (Outcome).
type Processed struct {
	Item    Item
	Outcome string
}

// Done records that each event was processed, and how, in one statement.
// Its commit does not wait for the disk: a mark lost with the machine
// leaves its event pending, and it is processed again once its lease
// ends, which moves no money twice (a Handler is safe to run twice).
func (s Store) Done(ctx context.Context, done ...Processed) error {
	if len(done) == 0 {
		return nil
	}
	providers, envs, ids, outcomes := make([]string, len(done)), make([]string, len(done)), make([]string, len(done)), make([]string, len(done))
	for i, d := range done {
		providers[i], envs[i], ids[i], outcomes[i] = d.Item.Provider, string(d.Item.Environment), d.Item.ID, truncate(d.Outcome)
	}
	_, err := s.Pool.Exec(ctx, `
WITH unflushed AS (SELECT set_config('synchronous_commit', 'off', true))
UPDATE provider_inbox i SET state = 'done', outcome = d.outcome, processed_at = now(), last_error = NULL
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS d(provider, environment, event_id, outcome), unflushed
WHERE i.provider = d.provider AND i.environment = d.environment AND i.event_id = d.event_id AND i.state = 'pending'`,
		providers, envs, ids, outcomes)
	return err
}

// Retry records that processing it failed with cause, and makes it due
// again after wait; it returns when that is.
func (s Store) Retry(ctx context.Context, it Item, cause error, wait time.Duration) (next time.Time, err error) {
	msg := "unknown error"
	if cause != nil {
		msg = cause.Error()
	}
	err = s.Pool.QueryRow(ctx, `
UPDATE provider_inbox SET due_at = now() + $4::interval, last_error = $5
WHERE provider = $1 AND environment = $2 AND event_id = $3 AND state = 'pending'
RETURNING due_at`,
		it.Provider, string(it.Environment), it.ID, wait, truncate(msg)).Scan(&next)
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil // processed meanwhile by a process whose lease had not ended
	}
	return next, err
}

// maxNote bounds the outcome and error text kept per event: a provider's
// answer may be of any length.
const maxNote = 1000

func truncate(s string) string {
	if len(s) <= maxNote {
		return s
	}
	s = s[:maxNote]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// Summary is the inbox's state, for operators.
type Summary struct {
	Pending int
	Done    int
	// Failing are the pending events whose processing has failed at least
	// once, oldest first (at most 20).
	Failing []Failing
	// OldestPending is when the oldest pending event was received (zero
	// when none is).
	OldestPending time.Time
}

// Failing is a pending event that failed.
type Failing struct {
	Provider    string
	Environment domain.Environment
	ID, Name    string
	Attempts    int
	LastError   string
	ReceivedAt  time.Time
	DueAt       time.Time
}

// Status summarizes the inbox.
func (s Store) Status(ctx context.Context) (Summary, error) {
	var out Summary
	var oldest *time.Time
	err := s.Pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'done'),
       min(received_at) FILTER (WHERE state = 'pending')
FROM provider_inbox`).Scan(&out.Pending, &out.Done, &oldest)
	if err != nil {
		return out, err
	}
	if oldest != nil {
		out.OldestPending = *oldest
	}
	rows, err := s.Pool.Query(ctx, `
SELECT provider, environment, event_id, name, attempts, coalesce(last_error, ''), received_at, due_at
FROM provider_inbox WHERE state = 'pending' AND last_error IS NOT NULL
ORDER BY received_at LIMIT 20`)
	if err != nil {
		return out, err
	}
	out.Failing, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Failing, error) {
		var f Failing
		var env string
		err := r.Scan(&f.Provider, &env, &f.ID, &f.Name, &f.Attempts, &f.LastError, &f.ReceivedAt, &f.DueAt)
		f.Environment = domain.Environment(env)
		return f, err
	})
	return out, err
}

// Backlog is what waits in the inbox, read from the pending rows alone
// (cheap enough for every metrics scrape): how many, how many of them
// have failed, and how long the oldest has waited (0 when none).
func (s Store) Backlog(ctx context.Context) (pending, failing int, oldest time.Duration, err error) {
	var waited *time.Duration
	err = s.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE last_error IS NOT NULL),
       greatest(now() - min(received_at), interval '0')
FROM provider_inbox WHERE state = 'pending'`).Scan(&pending, &failing, &waited)
	if err == nil && waited != nil {
		oldest = *waited
	}
	return pending, failing, oldest, err
}

// Prune deletes the events processed longer than retention ago, and
// returns how many.
// A provider delivering one again after that keeps it afresh and it is
// processed again, which moves no money twice (the handler's rules are
// idempotent): pruning only shortens the window in which a repeat is
// recognised without asking the provider.
func (s Store) Prune(ctx context.Context, retention time.Duration) (int64, error) {
	tag, err := s.Pool.Exec(ctx, `DELETE FROM provider_inbox WHERE state = 'done' AND processed_at < now() - $1::interval`, retention)
	return tag.RowsAffected(), err
}
