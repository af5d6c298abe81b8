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

// Horizon reports events that have committed but lie beyond the visibility
// horizon Head and ReadAll respect: they wait for an older transaction (in
// any database of the server, since transaction ids are server-wide) to end.
// The oldest such transaction is looked up in pg_stat_activity and
// pg_prepared_xacts only when the oldest held event has waited longer than
// explainAfter; without the pg_read_all_stats role another user's session
// shows without its query.
func (s *Store) Horizon(ctx context.Context, limit int64, explainAfter time.Duration) (eventstore.Horizon, error) {
	if limit <= 0 {
		limit = math.MaxInt64
	}
	var (
		h      eventstore.Horizon
		waited float64
	)
	// The primary key (tx_id, seq) finds the held events; the lowest
	// transaction ids come first, so the oldest event is among any capped
	// prefix.
	err := s.pool.QueryRow(ctx,
		`SELECT count(*), coalesce(extract(epoch FROM clock_timestamp() - min(recorded_at)), 0)::float8
		 FROM (SELECT recorded_at FROM es_events
		       WHERE tx_id >= pg_snapshot_xmin(pg_current_snapshot())
		       ORDER BY tx_id, seq LIMIT $1) held`, limit).Scan(&h.Held, &waited)
	if err != nil {
		return eventstore.Horizon{}, err
	}
	if h.Held == 0 {
		return h, nil
	}
	h.HeldFor = time.Duration(waited * float64(time.Second))
	if h.HeldFor <= explainAfter {
		return h, nil
	}
	err = s.pool.QueryRow(ctx,
		`SELECT descr FROM (
		   SELECT format('pid %s in database %s (user %s, application %s, %s, transaction open for %s): %s',
		                 pid, coalesce(datname, '?'), coalesce(usename, '?'), coalesce(nullif(application_name, ''), '-'),
		                 coalesce(state, 'state hidden'), date_trunc('second', clock_timestamp() - xact_start),
		                 coalesce(left(query, 200), 'query hidden')) AS descr,
		          age(backend_xid) AS age
		   FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()
		   UNION ALL
		   SELECT format('prepared transaction %L in database %s (owner %s, prepared %s ago)',
		                 gid, database, owner, date_trunc('second', clock_timestamp() - prepared)),
		          age(transaction)
		   FROM pg_prepared_xacts) open
		 ORDER BY age DESC LIMIT 1`).Scan(&h.Blocker)
	if errors.Is(err, pgx.ErrNoRows) {
		// The blocker ended between the two queries.
		return h, nil
	}
	if err != nil {
		return eventstore.Horizon{}, err
	}
	return h, nil
}
