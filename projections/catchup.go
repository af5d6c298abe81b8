// Catching up once, without a running Runner (operator commands).

package projections

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/eventstore"
)

// CatchUp applies every projector once up to the log's last event as of
// the call (every append acknowledged before it), then returns; operator commands use it when no server runs. It is safe
// while Runners run the same projectors: when another session holds a
// projector's lock, CatchUp waits for that session's checkpoint to reach the
// head instead, or applies the rest itself once the lock is free (the
// holder may have stopped short of the head), failing with ErrLagging if
// the checkpoint stops moving for 30 s while the lock stays held.
func CatchUp(ctx context.Context, store eventstore.Store, pool *pgxpool.Pool, log *zap.Logger, ps ...Projector) error {
	return CatchUpTo(ctx, store, pool, log, eventstore.Start, ps...)
}

// CatchUpTo is CatchUp up to at least position at (a write's own position).
// An event becomes readable only when every older transaction appending to
// the log has ended, so a catch-up may wait for one; it says so in the log
// and fails with ErrLagging when nothing becomes readable for 30 s.
func CatchUpTo(ctx context.Context, store eventstore.Store, pool *pgxpool.Pool, log *zap.Logger, at eventstore.Position, ps ...Projector) error {
	if log == nil {
		log = zap.NewNop()
	}
	if err := checkNames(ps); err != nil {
		return err
	}
	for _, p := range ps {
		if err := catchUpOne(ctx, store, pool, log, p, at); err != nil {
			return fmt.Errorf("projection %s: %w", p.Name(), err)
		}
	}
	return nil
}

func catchUpOne(ctx context.Context, store eventstore.Store, pool *pgxpool.Pool, log *zap.Logger, p Projector, at eventstore.Position) error {
	head, err := store.Last(ctx)
	if err != nil {
		return err
	}
	if head.Less(at) {
		head = at
	}
	// When another session holds the projector's lock, wait for its
	// checkpoint to reach head, taking the lock as soon as it is free: the
	// holder may stop short of head and release it (another operator
	// command catching up to an earlier write), and then nobody else would
	// move the checkpoint.
	var last eventstore.Position
	lastMove, waiting := time.Now(), false
	for {
		ran, err := catchUpLocked(ctx, store, pool, log, p, head)
		if err != nil || ran {
			return err
		}
		if !waiting {
			waiting = true
			log.Info("projections: active elsewhere, waiting for it to reach head",
				zap.String("projection", p.Name()), zap.Stringer("head", head))
		}
		cps, err := loadCheckpoints(ctx, pool, []string{p.Name()})
		if err != nil {
			return err
		}
		pos := cps[p.Name()]
		if pos.AtLeast(head) {
			return nil
		}
		if pos != last {
			last, lastMove = pos, time.Now()
		} else if time.Since(lastMove) > catchUpStall {
			return fmt.Errorf("%w: %s stuck at %s, waiting for %s", ErrLagging, p.Name(), pos, head)
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// catchUpLocked applies p up to head if it can take p's lock (ran), and
// does nothing if another session holds it.
func catchUpLocked(ctx context.Context, store eventstore.Store, pool *pgxpool.Pool, log *zap.Logger, p Projector, head eventstore.Position) (ran bool, err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+lockKeySQL+`)`, p.Name()).Scan(&locked); err != nil {
		conn.Release()
		return false, err
	}
	if !locked {
		conn.Release()
		return false, nil
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock(`+lockKeySQL+`)`, p.Name()); err != nil {
			_ = conn.Conn().Close(uctx)
		}
		conn.Release()
	}()
	pos, err := applyUpTo(ctx, store, pool, p, head, catchUpBatch, func(pos eventstore.Position) {
		f := []zap.Field{zap.String("projection", p.Name()), zap.Stringer("checkpoint", pos), zap.Stringer("target", head)}
		if hr, ok := store.(eventstore.HorizonReporter); ok {
			if h, err := hr.Horizon(ctx, 1, 0); err == nil && h.Blocker != "" {
				f = append(f, zap.String("heldBy", h.Blocker))
			}
		}
		log.Warn("projections: waiting for events held back by an open log writer", f...)
	})
	if err != nil {
		return true, err
	}
	log.Info("projections: caught up", zap.String("projection", p.Name()), zap.Stringer("checkpoint", pos))
	return true, nil
}

// applyUpTo applies the log from the stored checkpoint until it is at or
// after target. The caller should hold the projector's advisory lock, but
// correctness does not depend on it (applyBatch re-syncs). held, when set,
// is told once per second that the log is held back short of target.
func applyUpTo(ctx context.Context, store eventstore.Store, pool *pgxpool.Pool, p Projector, target eventstore.Position, batch int, held func(eventstore.Position)) (eventstore.Position, error) {
	pos, err := prepare(ctx, pool, p)
	if err != nil {
		return pos, err
	}
	var waited time.Duration
	for pos.Less(target) {
		events, err := store.ReadAll(ctx, pos, batch)
		if err != nil {
			return pos, err
		}
		if len(events) == 0 {
			// target is not readable yet: an older write transaction is
			// still open. Wait for it, within the stall limit.
			if waited > catchUpStall {
				return pos, fmt.Errorf("%w: %s stuck at %s, waiting for %s", ErrLagging, p.Name(), pos, target)
			}
			if held != nil && waited%time.Second == 0 && waited > 0 {
				held(pos)
			}
			if !sleep(ctx, 5*time.Millisecond) {
				return pos, ctx.Err()
			}
			waited += 5 * time.Millisecond
			continue
		}
		waited = 0
		var next eventstore.Position
		if concerns(p, events) {
			next, err = applyBatch(ctx, pool, p, pos, events)
		} else {
			next = events[len(events)-1].Position
			err = skipBatch(ctx, pool, p.Name(), pos, next)
		}
		if errors.Is(err, errResync) {
			cps, err := loadCheckpoints(ctx, pool, []string{p.Name()})
			if err != nil {
				return pos, err
			}
			pos = cps[p.Name()]
			continue
		}
		if err != nil {
			return pos, err
		}
		pos = next
	}
	return pos, nil
}
