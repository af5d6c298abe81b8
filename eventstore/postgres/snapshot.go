package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/eventstore"
)

var _ eventstore.SnapshotStore = (*Store)(nil)

// ReadSnapshot reads es_snapshots (migration 0003).
func (s *Store) ReadSnapshot(ctx context.Context, stream string) (eventstore.Snapshot, bool, error) {
	snap := eventstore.Snapshot{Stream: stream}
	var rev int64
	err := s.pool.QueryRow(ctx, `SELECT revision, data FROM es_snapshots WHERE stream_id = $1`, stream).Scan(&rev, &snap.Data)
	if errors.Is(err, pgx.ErrNoRows) {
		return snap, false, nil
	}
	if err != nil || rev < 0 {
		return snap, false, err
	}
	snap.Revision = uint64(rev)
	return snap, true, nil
}

// WriteSnapshot upserts the stream's snapshot, never moving it back to an
// earlier revision.
func (s *Store) WriteSnapshot(ctx context.Context, snap eventstore.Snapshot) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO es_snapshots AS s (stream_id, revision, data) VALUES ($1, $2, $3)
		ON CONFLICT (stream_id) DO UPDATE SET revision = excluded.revision, data = excluded.data, written_at = now()
		WHERE s.revision < excluded.revision`, snap.Stream, int64(snap.Revision), snap.Data)
	return err
}
