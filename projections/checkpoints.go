package projections

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/eventstore"
)

// Checkpoints live in projection_checkpoints (migrations/0001_baseline.sql). Every batch
// locks its projector's row FOR UPDATE before writing, so whoever applies
// events (the active runner, a standby that just took over, an operator's
// catch-up, a rebuild's swap) is serialised on that row, and each of them
// skips what the stored checkpoint already covers.

// errResync tells a reader that the stored checkpoint is not where it
// expected (someone else moved it): it must restart reading from the stored
// checkpoint. Nothing of the batch was written.
var errResync = errors.New("projections: checkpoint moved, re-reading from it")

// lockKeySQL is the session advisory lock key of a projector (name in $1).
const lockKeySQL = `hashtext('projection:' || $1)`

// toDB stores a uint64 position part as its bit pattern, so that any value
// round-trips exactly; comparisons happen in Go.
func toDB(u uint64) int64 { return int64(u) }

func fromDB(i int64) uint64 { return uint64(i) }

// ensureCheckpoint creates the projector's checkpoint row at Start if absent.
func ensureCheckpoint(ctx context.Context, pool *pgxpool.Pool, name string) error {
	_, err := pool.Exec(ctx,
		`INSERT INTO projection_checkpoints (name) VALUES ($1) ON CONFLICT (name) DO NOTHING`, name)
	return err
}

// lockCheckpoint reads the checkpoint row FOR UPDATE within tx.
func lockCheckpoint(ctx context.Context, tx pgx.Tx, name string) (eventstore.Position, error) {
	var c, p int64
	err := tx.QueryRow(ctx,
		`SELECT commit_pos, prepare_pos FROM projection_checkpoints WHERE name = $1 FOR UPDATE`, name).Scan(&c, &p)
	if errors.Is(err, pgx.ErrNoRows) {
		return eventstore.Position{}, fmt.Errorf("projections: no checkpoint row for %q", name)
	}
	if err != nil {
		return eventstore.Position{}, err
	}
	return eventstore.Position{Commit: fromDB(c), Prepare: fromDB(p)}, nil
}

func storeCheckpoint(ctx context.Context, tx pgx.Tx, name string, pos eventstore.Position) error {
	_, err := tx.Exec(ctx,
		`UPDATE projection_checkpoints
		    SET commit_pos = $2, prepare_pos = $3, updated_at = now(), last_error = NULL, last_error_at = NULL
		  WHERE name = $1`,
		name, toDB(pos.Commit), toDB(pos.Prepare))
	return err
}

// loadCheckpoints reads the stored checkpoints of names; absent rows are
// missing from the map.
func loadCheckpoints(ctx context.Context, pool *pgxpool.Pool, names []string) (map[string]eventstore.Position, error) {
	rows, err := pool.Query(ctx,
		`SELECT name, commit_pos, prepare_pos FROM projection_checkpoints WHERE name = ANY($1)`, names)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]eventstore.Position, len(names))
	for rows.Next() {
		var (
			n    string
			c, p int64
		)
		if err := rows.Scan(&n, &c, &p); err != nil {
			return nil, err
		}
		out[n] = eventstore.Position{Commit: fromDB(c), Prepare: fromDB(p)}
	}
	return out, rows.Err()
}

// validName reports whether name is a usable projector name: it is stored,
// used in advisory lock keys and in shadow schema names.
func validName(name string) bool {
	if name == "" || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// recordError stores a projector's last failure for Status (best effort).
func recordError(ctx context.Context, pool *pgxpool.Pool, name string, failure error) error {
	_, err := pool.Exec(ctx,
		`UPDATE projection_checkpoints SET last_error = $2, last_error_at = now() WHERE name = $1`,
		name, failure.Error())
	return err
}
