package webhooks

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// DefaultRetention is how long finished deliveries are kept by default
// (ESCROW_WEBHOOK_RETENTION): delivered and no_endpoint ones this long after
// they finished, failed ones FailedRetentionFactor times as long.
const DefaultRetention = 720 * time.Hour

// FailedRetentionFactor stretches the retention of failed deliveries, so a
// merchant can still find and retry them well after the others are gone.
const FailedRetentionFactor = 3

// DefaultSweepInterval is the least time between two sweeps, across every
// instance sharing the database.
const DefaultSweepInterval = 5 * time.Minute

// defaultSweepBatch is how many deliveries one delete removes (with their
// attempts), each in its own short transaction.
const defaultSweepBatch = 500

// sweepLockSQL is the session advisory lock a sweep holds, so that only one
// instance sweeps at a time.
const sweepLockSQL = `hashtext('webhooks:retention')`

// Sweeper deletes finished deliveries past their retention, and their
// attempts (ON DELETE CASCADE). Only terminal rows are deleted (delivered,
// no_endpoint, failed; selected by status and finished_at, and locked
// before deletion), so a sweep never races an attempt in flight: a pending
// or delivering row has no finished_at, and a manual retry clears it. A
// retry that comes after a row was swept finds no delivery.
//
// Every dispatcher runs one (Dispatcher.Run); the instances sweep at most
// once per Interval together: a sweep takes an advisory try-lock (another
// instance sweeping means this one skips) and then starts only if the
// last sweep anywhere (webhook_retention.swept_at) is at least Interval old.
type Sweeper struct {
	Pool *pgxpool.Pool
	Log  *zap.Logger
	// Retention is how long delivered and no_endpoint deliveries are kept
	// after they finished; failed ones are kept FailedRetentionFactor times
	// as long (default DefaultRetention).
	Retention time.Duration
	// Interval is the least time between sweeps across instances (default
	// DefaultSweepInterval).
	Interval time.Duration
	// Batch is how many deliveries one delete removes (default 500).
	Batch int
	// Now is the clock of ages and of the interval (default time.Now).
	Now func() time.Time
}

// SweepResult is what one Sweep did.
type SweepResult struct {
	// Ran is false when the sweep was skipped: another instance is sweeping,
	// or one swept less than Interval ago.
	Ran bool
	// Deleted counts the deleted deliveries by status.
	Deleted map[string]int64
}

func (s *Sweeper) defaults() {
	if s.Log == nil {
		s.Log = zap.NewNop()
	}
	if s.Retention <= 0 {
		s.Retention = DefaultRetention
	}
	if s.Interval <= 0 {
		s.Interval = DefaultSweepInterval
	}
	if s.Batch <= 0 {
		s.Batch = defaultSweepBatch
	}
	if s.Now == nil {
		s.Now = time.Now
	}
}

// Run sweeps until ctx ends: it checks whether a sweep is due every quarter
// Interval (a try-lock and a one-row update when it is not), starting now.
func (s *Sweeper) Run(ctx context.Context) {
	s.defaults()
	every := max(s.Interval/4, time.Second)
	for {
		if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.Log.Warn("webhooks: retention sweep failed; next try later", zap.Error(err))
		}
		sleepCtx(ctx, every)
		if ctx.Err() != nil {
			return
		}
	}
}

// Sweep deletes, in batches of Batch, the deliveries that finished longer
// ago than their retention, unless another instance is sweeping or one
// swept less than Interval ago.
func (s *Sweeper) Sweep(ctx context.Context) (SweepResult, error) {
	s.defaults()
	res := SweepResult{Deleted: map[string]int64{}}
	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		return res, err
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+sweepLockSQL+`)`).Scan(&locked); err != nil {
		return res, err
	}
	if !locked {
		return res, nil
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock(`+sweepLockSQL+`)`); err != nil {
			// A connection that may still hold the lock must not go back
			// to the pool: closing it ends the session and the lock.
			_ = conn.Conn().Close(uctx)
		}
	}()
	now := s.Now()
	// Take this interval's sweep. A last sweep more than an interval in
	// the future comes from a clock that was wrong (or was set back): it
	// does not block sweeping forever.
	tag, err := conn.Exec(ctx, `
		INSERT INTO webhook_retention (singleton, swept_at) VALUES (true, $1)
		ON CONFLICT (singleton) DO UPDATE SET swept_at = EXCLUDED.swept_at
		 WHERE webhook_retention.swept_at <= $2 OR webhook_retention.swept_at > $3`,
		now, now.Add(-s.Interval), now.Add(s.Interval))
	if err != nil {
		return res, err
	}
	if tag.RowsAffected() == 0 {
		return res, nil
	}
	res.Ran = true
	for _, c := range []struct {
		status string
		keep   time.Duration
	}{
		{StatusDelivered, s.Retention},
		{StatusNoEndpoint, s.Retention},
		{StatusFailed, FailedRetentionFactor * s.Retention},
	} {
		before := now.Add(-c.keep)
		for {
			// The rows are locked before they are deleted and re-checked
			// when locked (READ COMMITTED re-evaluates a row that changed
			// since the snapshot), and rows locked by a retry in progress
			// are skipped: a row that stopped being terminal is never
			// deleted.
			tag, err := conn.Exec(ctx, `
				WITH doomed AS (
				    SELECT id FROM webhook_deliveries
				     WHERE status = $1 AND finished_at < $2
				     ORDER BY finished_at
				     LIMIT $3
				     FOR UPDATE SKIP LOCKED)
				DELETE FROM webhook_deliveries d USING doomed
				 WHERE d.id = doomed.id AND d.status = $1 AND d.finished_at < $2`,
				c.status, before, s.Batch)
			if err != nil {
				return res, err
			}
			res.Deleted[c.status] += tag.RowsAffected()
			if tag.RowsAffected() < int64(s.Batch) || ctx.Err() != nil {
				break
			}
		}
	}
	if n := res.Deleted[StatusDelivered] + res.Deleted[StatusNoEndpoint] + res.Deleted[StatusFailed]; n > 0 {
		s.Log.Info("webhooks: retention sweep", zap.Int64("delivered", res.Deleted[StatusDelivered]),
			zap.Int64("no_endpoint", res.Deleted[StatusNoEndpoint]), zap.Int64("failed", res.Deleted[StatusFailed]),
			zap.Duration("retention", s.Retention))
	}
	return res, ctx.Err()
}
