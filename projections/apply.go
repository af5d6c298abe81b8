// Applying one batch of events and moving the checkpoint with it.

package projections

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/eventstore"
)

// prepare makes sure the projector's tables and checkpoint row exist and
// returns its checkpoint. The DDL runs under the checkpoint row lock so that
// it never races a rebuild's table swap.
func prepare(ctx context.Context, pool *pgxpool.Pool, p Projector) (eventstore.Position, error) {
	if err := ensureCheckpoint(ctx, pool, p.Name()); err != nil {
		return eventstore.Position{}, err
	}
	var pos eventstore.Position
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		if pos, err = lockCheckpoint(ctx, tx, p.Name()); err != nil {
			return err
		}
		if ddl := p.Schema(); ddl != "" {
			if _, err := tx.Exec(ctx, ddl); err != nil {
				return fmt.Errorf("schema: %w", err)
			}
		}
		return nil
	})
	return pos, err
}

// applyBatch applies events, which follow position expected in the log, and
// moves the checkpoint to their end, in one transaction. The checkpoint is
// moved only if it is still at expected; if another applier moved it (an
// overlapping applier, or a rebuild swapping the tables in) nothing is
// applied, not even in a transaction that rolls back, and errResync tells
// the caller to re-read the stored checkpoint and continue from there. It
// returns the new checkpoint.
func applyBatch(ctx context.Context, pool *pgxpool.Pool, p Projector, expected eventstore.Position, events []eventstore.RecordedEvent) (eventstore.Position, error) {
	if len(events) == 0 {
		return expected, nil
	}
	if pl, ok := p.(Planner); ok {
		return applyPlanned(ctx, pool, p, pl, expected, events)
	}
	last := events[len(events)-1].Position
	// A read model is derived data whose checkpoint commits with it: if the
	// server crashes before this commit reaches disk, both roll back together
	// and the batch is applied again from the durable log. So the commit need
	// not wait for the WAL flush, which takes one fsync off the latency of
	// every write that waits for its read model.
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: `BEGIN; SET LOCAL synchronous_commit TO off`})
	if err != nil {
		return eventstore.Position{}, err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // after Commit it is a no-op
	// The checkpoint moves first: the update locks its row before any
	// read-model table is touched (the order prepare's schema changes take
	// too, else the two deadlock), and only an applier that finds it at
	// expected applies. Apply must only ever see read models at expected:
	// over rows already past the batch it would fold the batch in a second
	// time, and though that transaction rolls back, what a projector
	// remembers of it (the escrow states) would not.
	if _, err := tx.Exec(ctx, advanceSQL, advanceArgs(p.Name(), expected, last)...); err != nil {
		return eventstore.Position{}, advanceErr(err)
	}
	committed := false
	if o, ok := p.(CommitObserver); ok {
		defer func() { o.Committed(committed) }()
	}
	if err := p.Apply(ctx, tx, events); err != nil {
		return eventstore.Position{}, fmt.Errorf("apply: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return eventstore.Position{}, err
	}
	committed = true
	return last, nil
}

// applyPlanned is applyBatch for a Planner, in one round trip: a pipeline
// of the commit setting, the checkpoint move (projection_advance, which
// raises EP001 unless the checkpoint is at expected) and the planned
// writes, ending in one Sync, so that they run as one implicit transaction
// and an error anywhere rolls back all of it. synchronous_commit is off for
// the reason applyBatch gives, with set_config local to the transaction
// (SET LOCAL is documented for explicit transaction blocks only).
func applyPlanned(ctx context.Context, pool *pgxpool.Pool, p Projector, pl Planner, expected eventstore.Position, events []eventstore.RecordedEvent) (eventstore.Position, error) {
	last := events[len(events)-1].Position
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('synchronous_commit', 'off', true)`)
	b.Queue(advanceSQL, advanceArgs(p.Name(), expected, last)...)
	committed := false
	if o, ok := p.(CommitObserver); ok {
		defer func() { o.Committed(committed) }()
	}
	onCommit, err := pl.Plan(ctx, pool, events, b)
	if err != nil {
		return eventstore.Position{}, fmt.Errorf("apply: %w", err)
	}
	if err := advanceErr(pool.SendBatch(ctx, b).Close()); err != nil {
		if errors.Is(err, errResync) {
			return eventstore.Position{}, err
		}
		return eventstore.Position{}, fmt.Errorf("apply: %w", err)
	}
	committed = true
	if onCommit != nil {
		onCommit()
	}
	return last, nil
}

// advanceSQL moves checkpoint $1 to ($2, $3) if it is at ($4, $5), and
// raises EP001 if it is not (migrations/0001_baseline.sql): the one move of every
// single applier, waiting for the row lock so that an overlapping
// applier's commit decides (its move wins, this one finds the checkpoint
// elsewhere). advanceArgs gives its arguments, advanceErr reads its error.
const advanceSQL = `SELECT projection_advance($1, $2, $3, $4, $5)`

func advanceArgs(name string, expected, next eventstore.Position) []any {
	return []any{name, toDB(next.Commit), toDB(next.Prepare), toDB(expected.Commit), toDB(expected.Prepare)}
}

// advanceErr is errResync for a checkpoint found elsewhere, err otherwise.
func advanceErr(err error) error {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "EP001" {
		return errResync
	}
	return err
}
