package projections

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/projector"
)

// planned is a Planner writing one row per batch into planned_rows: the
// value of synchronous_commit its statement ran under. With fail set it
// also queues a statement that fails, after the row.
type planned struct {
	fail      bool
	syncOn    bool // ask for a synchronous commit, as a leasing subscriber does
	committed int
}

func (*planned) Name() string { return "planned_test" }
func (*planned) Schema() string {
	// at_commit is synchronous_commit as the commit sees it: a deferred
	// constraint trigger runs when the transaction commits.
	return `
CREATE TABLE IF NOT EXISTS planned_rows (id bigserial PRIMARY KEY, sync_commit text NOT NULL, at_commit text);
CREATE OR REPLACE FUNCTION planned_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE planned_rows SET at_commit = current_setting('synchronous_commit') WHERE id = NEW.id;
  RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS planned_at_commit ON planned_rows;
CREATE CONSTRAINT TRIGGER planned_at_commit AFTER INSERT ON planned_rows
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION planned_at_commit();`
}
func (*planned) Tables() []string { return []string{"planned_rows"} }
func (p *planned) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error {
	return projector.ApplyPlan(ctx, p, tx, events)
}
func (p *planned) Plan(_ context.Context, _ Querier, _ []eventstore.RecordedEvent, b *pgx.Batch) (func(), error) {
	if p.syncOn {
		b.Queue(`SELECT set_config('synchronous_commit', 'on', true)`)
	}
	b.Queue(`INSERT INTO planned_rows (sync_commit) SELECT current_setting('synchronous_commit')`)
	if p.fail {
		b.Queue(`SELECT 1 / (SELECT count(*) FROM planned_rows WHERE false)`)
	}
	return func() { p.committed++ }, nil
}

// TestPlannedBatchIsOneTransaction: the runner sends a Planner's batch as
// one pipeline without BEGIN or COMMIT, relying on PostgreSQL running
// everything before the pipeline's one Sync as one implicit transaction.
// So a statement failing after the checkpoint move and a write must leave
// neither; a checkpoint elsewhere must apply nothing (errResync); and the
// commit must not wait for the WAL flush, while the connection goes back
// to the pool with the server's setting (set_config local to the
// transaction, since SET LOCAL would not work outside a block).
func TestPlannedBatchIsOneTransaction(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := &planned{}
	if _, err := prepare(ctx, e.pool, p); err != nil {
		t.Fatal(err)
	}
	first := []eventstore.RecordedEvent{{Position: eventstore.Position{Commit: 10, Prepare: 1}}}
	second := []eventstore.RecordedEvent{{Position: eventstore.Position{Commit: 11, Prepare: 2}}}

	p.fail = true
	if _, err := applyBatch(ctx, e.pool, p, eventstore.Start, first); err == nil || errors.Is(err, errResync) {
		t.Fatalf("a failing planned statement: %v, want its error", err)
	}
	if cp := checkpointOf(t, e.pool, p.Name()); cp != eventstore.Start {
		t.Fatalf("checkpoint %s after a failed batch, want it unmoved", cp)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM planned_rows`); n != 0 || p.committed != 0 {
		t.Fatalf("a failed batch left %d rows and ran onCommit %d times", n, p.committed)
	}

	p.fail = false
	if _, err := applyBatch(ctx, e.pool, p, first[0].Position, second); !errors.Is(err, errResync) {
		t.Fatalf("a batch starting where the checkpoint is not: %v, want errResync", err)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM planned_rows`); n != 0 || p.committed != 0 {
		t.Fatalf("a batch that lost its checkpoint left %d rows and ran onCommit %d times", n, p.committed)
	}

	next, err := applyBatch(ctx, e.pool, p, eventstore.Start, first)
	if err != nil {
		t.Fatal(err)
	}
	if next != first[0].Position || checkpointOf(t, e.pool, p.Name()) != next || p.committed != 1 {
		t.Fatalf("applied: returned %s, stored %s, onCommit ran %d times; want %s, %s, 1",
			next, checkpointOf(t, e.pool, p.Name()), p.committed, first[0].Position, first[0].Position)
	}
	var setting, atCommit string
	if err := e.pool.QueryRow(ctx, `SELECT sync_commit, at_commit FROM planned_rows`).Scan(&setting, &atCommit); err != nil {
		t.Fatal(err)
	}
	if setting != "off" || atCommit != "off" {
		t.Fatalf("the batch ran with synchronous_commit %q and committed with %q, want off", setting, atCommit)
	}
	// Every connection the pool holds is back at the server's setting.
	conns := e.pool.Stat().TotalConns()
	for range conns {
		c, err := e.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		if err := c.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&setting); err != nil {
			t.Fatal(err)
		}
		if setting != "on" {
			t.Fatalf("a pooled connection kept synchronous_commit %q after the batch", setting)
		}
	}
}

// A Planner may ask for its batch to commit synchronously (the webhook
// subscriber does when it stored attempts leased to its dispatcher, whose
// numbers must survive a crash): the runner's own setting goes first in
// the pipeline, so the Planner's is the one the commit sees.
func TestPlannerMayCommitSynchronously(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := &planned{syncOn: true}
	if _, err := prepare(ctx, e.pool, p); err != nil {
		t.Fatal(err)
	}
	if _, err := applyBatch(ctx, e.pool, p, eventstore.Start,
		[]eventstore.RecordedEvent{{Position: eventstore.Position{Commit: 10, Prepare: 1}}}); err != nil {
		t.Fatal(err)
	}
	var atCommit string
	if err := e.pool.QueryRow(ctx, `SELECT at_commit FROM planned_rows`).Scan(&atCommit); err != nil {
		t.Fatal(err)
	}
	if atCommit != "on" {
		t.Fatalf("the Planner's batch committed with synchronous_commit %q, want on", atCommit)
	}
}
