// Package projector is the contract between the runner that follows the
// global event log (projections.Runner) and each consumer it drives: the
// read models of package projections and the webhook subscriber. A consumer
// implements Projector (and optionally Planner, CommitObserver,
// Interested) and needs nothing else of projections, so an adapter such as
// webhooks can be driven by the runner without importing the read models.
// It also decodes the log's ledger entries (entries.go), which every reader
// of money shares.
package projector

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/eventstore"
)

// Projector is one consumer of the log the runner drives: a read model, or the
// webhook subscriber (which writes an outbox).
type Projector interface {
	// Name is the stored checkpoint name: never rename one casually.
	Name() string
	// Schema is the DDL creating the projector's tables with unqualified
	// names and IF NOT EXISTS; a rebuild runs it in a shadow schema.
	Schema() string
	// Tables lists the tables Schema creates (moved into place on rebuild).
	Tables() []string
	// Apply writes the effect of events within tx. Table names must be
	// unqualified so that search_path selects live or shadow tables.
	Apply(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error
}

// Planner is implemented by a projector whose writes need no answer from
// the database: Plan queues them on b instead of executing them, and the
// runner sends them after the checkpoint move in one pipeline, one round
// trip and one implicit transaction, instead of BEGIN, the move, the
// writes and COMMIT in four.
//
// Reads that planning needs (rows the batch changes that the projector
// does not remember) go through r. The runner passes the pool, so they
// run before the transaction, and the rows read may be ahead of the batch
// when another applier moved on; the checkpoint move in the pipeline then
// fails and nothing commits. So nothing computed from what Plan read may
// outlive a failed batch: what the projector wants to remember goes into
// onCommit, which the runner calls only once the batch has committed.
// (Apply, for rebuilds and catch-ups in a transaction that already moved
// the checkpoint, may call it at once.)
type Planner interface {
	Plan(ctx context.Context, r Querier, events []eventstore.RecordedEvent, b *pgx.Batch) (onCommit func(), err error)
}

// Querier reads: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ApplyPlan is Apply for a Planner within tx (rebuilds, catch-ups, tests):
// the checkpoint is already moved in tx, so what Plan read is at the
// batch's start.
func ApplyPlan(ctx context.Context, p Planner, tx pgx.Tx, events []eventstore.RecordedEvent) error {
	b := &pgx.Batch{}
	onCommit, err := p.Plan(ctx, tx, events, b)
	if err != nil {
		return err
	}
	if b.Len() > 0 {
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
	}
	if onCommit != nil {
		onCommit()
	}
	return nil
}

// CommitObserver is implemented by a projector that acts once the batch it
// applied is committed (or is not): the runner calls Committed after every
// Apply of applyBatch, with whether its transaction committed. An ambiguous
// commit (an error from COMMIT: the server may have committed without the
// answer arriving) counts as not committed, so an observer must be safe
// when a batch it was told failed did commit.
type CommitObserver interface {
	Committed(ok bool)
}

// Interested is implemented by a projector that reads only the streams
// whose names start with one of its prefixes. A batch with none of them
// only moves its checkpoint, in one round trip instead of a transaction of
// several statements: most batches concern one or two read models.
type Interested interface {
	StreamPrefixes() []string
}
