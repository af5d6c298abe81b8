package projections

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/eventstore"
)

// rebuildBatch is the number of events replayed per transaction. Small
// transactions matter: a long one holds back the event store's visibility
// horizon (pg_snapshot_xmin), which would stall every live projector.
const rebuildBatch = 2000

// ErrRebuildRunning is returned by Rebuild when another rebuild of the same
// projector is in progress.
var ErrRebuildRunning = errors.New("projections: a rebuild of this projector is already running")

// ShadowSchema is the schema a rebuild of the projector named name fills.
func ShadowSchema(name string) string {
	var b strings.Builder
	b.WriteString("rebuild_")
	for _, c := range strings.ToLower(name) {
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if len(s) > 63 {
		s = s[:63]
	}
	return s
}

// Rebuild replays the whole log into fresh tables of p while the live tables
// keep serving and the live runner keeps projecting. It fills the tables of
// p.Schema() in the schema ShadowSchema(p.Name()) in transactions of 2,000
// events, reporting progress(done, total) after each (total is the size of
// the log at the start, raised if the replay passes it). Once caught up it
// swaps in one transaction: lock the checkpoint row (pausing the live
// runner), apply the events still missing, drop the live tables, move the
// shadow tables into the live schema, set the checkpoint to the replay's
// position. The live runner then re-syncs from that checkpoint.
//
// p.Schema() must create only tables and their indexes and constraints
// (those move with their table), and p.Tables() must name them all.
func Rebuild(ctx context.Context, pool *pgxpool.Pool, store eventstore.Store, p Projector, log *zap.Logger, progress func(done, total int64)) error {
	if log == nil {
		log = zap.NewNop()
	}
	if progress == nil {
		progress = func(int64, int64) {}
	}
	name := p.Name()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext('rebuild:' || $1))`, name).Scan(&locked); err != nil {
		conn.Release()
		return err
	}
	if !locked {
		conn.Release()
		return fmt.Errorf("%w: %s", ErrRebuildRunning, name)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock(hashtext('rebuild:' || $1))`, name); err != nil {
			_ = conn.Conn().Close(uctx)
		}
		conn.Release()
	}()

	var live string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&live); err != nil {
		return err
	}
	shadow := ShadowSchema(name)
	qShadow := pgx.Identifier{shadow}.Sanitize()
	// Inside the shadow, unqualified names resolve to shadow tables first;
	// the live schema stays visible for anything else a projector reads.
	searchPath := `SET LOCAL search_path TO ` + qShadow + `, ` + pgx.Identifier{live}.Sanitize()

	start := time.Now()
	head, err := store.Head(ctx)
	if err != nil {
		return err
	}
	total, err := countEvents(ctx, store, eventstore.Start, head, 0)
	if err != nil {
		return err
	}
	if err := ensureCheckpoint(ctx, pool, name); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+qShadow+` CASCADE`); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+qShadow); err != nil {
		return err
	}
	defer func() {
		// The shadow is useless after the swap (it is empty) and after a
		// failure (a new rebuild starts from scratch).
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, derr := pool.Exec(dctx, `DROP SCHEMA IF EXISTS `+qShadow+` CASCADE`); derr != nil {
			log.Warn("projections: cannot drop shadow schema", zap.String("schema", shadow), zap.Error(derr))
		}
	}()
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, searchPath); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, p.Schema())
		return err
	}); err != nil {
		return fmt.Errorf("shadow schema: %w", err)
	}

	log.Info("projections: rebuild started", zap.String("projection", name), zap.Int64("events", total))
	var (
		pos  = eventstore.Start
		done int64
	)
	report := func(n int) {
		done += int64(n)
		total = max(total, done)
		progress(done, total)
	}
	progress(0, total)
	// replay applies the log after pos into the shadow in tx, one batch.
	replay := func(tx pgx.Tx) (int, error) {
		events, err := store.ReadAll(ctx, pos, rebuildBatch)
		if err != nil || len(events) == 0 {
			return 0, err
		}
		if err := p.Apply(ctx, tx, events); err != nil {
			return 0, fmt.Errorf("apply: %w", err)
		}
		pos = events[len(events)-1].Position
		return len(events), nil
	}
	for {
		var n int
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, searchPath); err != nil {
				return err
			}
			var err error
			n, err = replay(tx)
			return err
		})
		if err != nil {
			return err
		}
		report(n)
		if n < rebuildBatch {
			break
		}
	}

	// The swap. Holding the checkpoint row lock pauses the live runner; the
	// events it still has to wait for are those committed since the last
	// batch above, which are few.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		stored, err := lockCheckpoint(ctx, tx, name)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, searchPath); err != nil {
			return err
		}
		for {
			n, err := replay(tx)
			if err != nil {
				return err
			}
			report(n)
			if n == 0 {
				break
			}
		}
		if pos.Less(stored) {
			// Cannot happen with a store whose ReadAll horizon only moves
			// forward; refuse rather than move the checkpoint backwards.
			return fmt.Errorf("projections: live checkpoint %s is ahead of the replay at %s", stored, pos)
		}
		var liveTables []string
		for _, t := range p.Tables() {
			liveTables = append(liveTables, pgx.Identifier{live, t}.Sanitize())
		}
		if len(liveTables) > 0 {
			if _, err := tx.Exec(ctx, `DROP TABLE IF EXISTS `+strings.Join(liveTables, ", ")); err != nil {
				return fmt.Errorf("drop live tables: %w", err)
			}
		}
		for _, t := range p.Tables() {
			if _, err := tx.Exec(ctx, `ALTER TABLE `+pgx.Identifier{shadow, t}.Sanitize()+` SET SCHEMA `+pgx.Identifier{live}.Sanitize()); err != nil {
				return fmt.Errorf("move table %s: %w", t, err)
			}
		}
		return storeCheckpoint(ctx, tx, name, pos)
	})
	if err != nil {
		return fmt.Errorf("swap: %w", err)
	}
	log.Info("projections: rebuild done", zap.String("projection", name), zap.Int64("events", done),
		zap.Stringer("checkpoint", pos), zap.Duration("took", time.Since(start)))
	return nil
}
