// Reading streams and the global log.

package postgres

import (
	"context"
	"errors"
	"math"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/eventstore"
)

// eventColumns aliases the text form of tx_id: unaliased, "tx_id::text" is
// an output column named tx_id, and a bare ORDER BY tx_id would then sort
// by that text ("1003" before "998"), reordering and skipping events each
// time transaction ids gain a digit. ORDER BY clauses qualify the column
// for the same reason.
const eventColumns = `event_id, stream_id, revision, tx_id::text AS commit_text, seq, event_type, data, metadata, recorded_at`

func scanEvents(rows pgx.Rows) ([]eventstore.RecordedEvent, error) {
	defer rows.Close()
	var out []eventstore.RecordedEvent
	for rows.Next() {
		var (
			e    eventstore.RecordedEvent
			tx   string
			seq  int64
			rev  int64
			meta []byte
		)
		if err := rows.Scan(&e.ID, &e.Stream, &rev, &tx, &seq, &e.Type, &e.Data, &meta, &e.RecordedAt); err != nil {
			return nil, err
		}
		commit, err := strconv.ParseUint(tx, 10, 64)
		if err != nil {
			return nil, err
		}
		e.Revision = uint64(rev)
		e.Position = eventstore.Position{Commit: commit, Prepare: uint64(seq)}
		e.Metadata = meta
		out = append(out, e)
	}
	return out, rows.Err()
}

func (s *Store) ReadStream(ctx context.Context, stream string, from uint64, limit int) ([]eventstore.RecordedEvent, error) {
	if limit <= 0 {
		limit = 1 << 30
	}
	rows, err := s.pool.Query(ctx,
		`SELECT `+eventColumns+` FROM es_events WHERE stream_id = $1 AND revision >= $2 ORDER BY es_events.revision LIMIT $3`,
		stream, int64(from), limit)
	if err != nil {
		return nil, err
	}
	return scanEvents(rows)
}

func (s *Store) ReadAll(ctx context.Context, after eventstore.Position, limit int) ([]eventstore.RecordedEvent, error) {
	if limit <= 0 {
		limit = 1000
	}
	h, err := s.horizon(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx,
		`SELECT `+eventColumns+` FROM es_events
		 WHERE (tx_id, seq) > ($1::text::xid8, $2) AND tx_id < $4::text::xid8
		 ORDER BY es_events.tx_id, es_events.seq LIMIT $3`,
		strconv.FormatUint(after.Commit, 10), int64(after.Prepare), limit, h)
	if err != nil {
		return nil, err
	}
	return scanEvents(rows)
}

func (s *Store) Head(ctx context.Context) (eventstore.Position, error) {
	h, err := s.horizon(ctx)
	if err != nil {
		return eventstore.Position{}, err
	}
	return s.newest(ctx, `SELECT tx_id::text AS commit_text, seq FROM es_events
		 WHERE tx_id < $1::text::xid8
		 ORDER BY es_events.tx_id DESC, es_events.seq DESC LIMIT 1`, h)
}

// horizon is the transaction id below which every event of the log is
// final (es_horizon, migrations 0006 and 0022): events of transactions
// below it that are not visible to a later statement never will be. Only
// transactions that append count, so an open transaction that does not
// write to the log (in any database of the server) holds no reader back.
// The caller reads with a later statement, in a transaction of its own.
//
// It finds the writers and their transaction ids in one look at pg_locks
// (each writer's lock and the lock on its own id). A writer's id is in
// other sessions' snapshots a moment before the lock on it is in the lock
// table, so for a writer found without one it asks pg_stat_activity, the
// costly part, which under load is most of a call when every call needs it.
func (s *Store) horizon(ctx context.Context) (string, error) {
	var h string
	err := s.pool.QueryRow(ctx, `SELECT es_horizon()::text`).Scan(&h)
	return h, err
}

// Last is the newest event of the statement's snapshot, past the horizon
// Head respects: an acknowledged append committed before the statement
// began, so it is visible to it, and its transaction id is at most the
// newest one seen.
func (s *Store) Last(ctx context.Context) (eventstore.Position, error) {
	return s.newest(ctx, `SELECT tx_id::text AS commit_text, seq FROM es_events
		 ORDER BY es_events.tx_id DESC, es_events.seq DESC LIMIT 1`)
}

// newest runs a query for one event position (Start when it finds none).
func (s *Store) newest(ctx context.Context, query string, args ...any) (eventstore.Position, error) {
	var (
		tx  string
		seq int64
	)
	err := s.pool.QueryRow(ctx, query, args...).Scan(&tx, &seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return eventstore.Start, nil
	}
	if err != nil {
		return eventstore.Position{}, err
	}
	commit, err := strconv.ParseUint(tx, 10, 64)
	if err != nil {
		return eventstore.Position{}, err
	}
	return eventstore.Position{Commit: commit, Prepare: uint64(seq)}, nil
}

// CountEvents counts the events in (after, upTo] with one index range scan,
// so lag reporting (readiness, status) never reads the events themselves.
// With limit > 0 the scan stops at limit events: a far-behind checkpoint
// costs a readiness probe no more than a near one.
func (s *Store) CountEvents(ctx context.Context, after, upTo eventstore.Position, limit int64) (int64, error) {
	if !after.Less(upTo) {
		return 0, nil
	}
	if limit <= 0 {
		limit = math.MaxInt64
	}
	var n int64
	err := s.pool.QueryRow(ctx,
		`SELECT count(*) FROM (SELECT 1 FROM es_events
		 WHERE (tx_id, seq) > ($1::text::xid8, $2) AND (tx_id, seq) <= ($3::text::xid8, $4) LIMIT $5) s`,
		strconv.FormatUint(after.Commit, 10), int64(after.Prepare),
		strconv.FormatUint(upTo.Commit, 10), int64(upTo.Prepare), limit).Scan(&n)
	return n, err
}
