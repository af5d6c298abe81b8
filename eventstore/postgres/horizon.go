// The horizon: events held back behind an open write transaction.

package postgres

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/eventstore"
)

// Horizon reports events that have committed but lie beyond the horizon
// Head and ReadAll respect: they wait for an older transaction that
// appends to the log (a log writer, see horizon) to end. What holds them is
// looked up only when the oldest held event has waited longer than
// explainAfter: the oldest open log writer, or, when the horizon is the
// server-wide one (on a standby, or while a writer of a role this one may
// not see is open), the oldest open transaction of the server. Without the
// pg_read_all_stats role another user's session shows without its query.
func (s *Store) Horizon(ctx context.Context, limit int64, explainAfter time.Duration) (eventstore.Horizon, error) {
	if limit <= 0 {
		limit = math.MaxInt64
	}
	h, err := s.horizon(ctx)
	if err != nil {
		return eventstore.Horizon{}, err
	}
	var (
		held   eventstore.Horizon
		waited float64
	)
	// The primary key (tx_id, seq) finds the held events; the lowest
	// transaction ids come first, so the oldest event is among any capped
	// prefix.
	err = s.pool.QueryRow(ctx,
		`SELECT count(*), coalesce(extract(epoch FROM clock_timestamp() - min(recorded_at)), 0)::float8
		 FROM (SELECT recorded_at FROM es_events
		       WHERE tx_id >= $2::text::xid8
		       ORDER BY tx_id, seq LIMIT $1) held`, limit, h).Scan(&held.Held, &waited)
	if err != nil {
		return eventstore.Horizon{}, err
	}
	if held.Held == 0 {
		return held, nil
	}
	held.HeldFor = time.Duration(waited * float64(time.Second))
	if held.HeldFor <= explainAfter {
		return held, nil
	}
	for _, query := range []string{oldestWriterSQL, oldestTransactionSQL} {
		err = s.pool.QueryRow(ctx, query).Scan(&held.Blocker)
		if !errors.Is(err, pgx.ErrNoRows) {
			break
		}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		// The blocker ended between the queries.
		return held, nil
	}
	if err != nil {
		return eventstore.Horizon{}, err
	}
	return held, nil
}

// describeSession is the description of a pg_stat_activity row a.
const describeSession = `format('pid %s in database %s (user %s, application %s, %s, transaction open for %s): %s',
	a.pid, coalesce(a.datname, '?'), coalesce(a.usename, '?'), coalesce(nullif(a.application_name, ''), '-'),
	coalesce(a.state, 'state hidden'), date_trunc('second', clock_timestamp() - a.xact_start),
	coalesce(left(a.query, 200), 'query hidden'))`

// describePrepared is the description of a pg_prepared_xacts row p.
const describePrepared = `format('prepared transaction %L in database %s (owner %s, prepared %s ago)',
	p.gid, p.database, p.owner, date_trunc('second', clock_timestamp() - p.prepared))`

// oldestWriterSQL describes the oldest open log writer.
const oldestWriterSQL = `SELECT descr FROM (
	SELECT ` + describeSession + ` AS descr, w.xid
	FROM es_log_writers() w JOIN pg_stat_activity a ON a.pid = w.pid WHERE w.xid IS NOT NULL
	UNION ALL
	SELECT ` + describePrepared + `, p.transaction::text::bigint
	FROM pg_prepared_xacts p WHERE p.database = current_database()) open
	ORDER BY xid LIMIT 1`

// oldestTransactionSQL describes the oldest open transaction of the server.
const oldestTransactionSQL = `SELECT descr FROM (
	SELECT ` + describeSession + ` AS descr, age(a.backend_xid) AS age
	FROM pg_stat_activity a WHERE a.backend_xid IS NOT NULL AND a.pid <> pg_backend_pid()
	UNION ALL
	SELECT ` + describePrepared + `, age(p.transaction)
	FROM pg_prepared_xacts p) open
	ORDER BY age DESC LIMIT 1`
