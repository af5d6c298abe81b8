package projections

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/eventstore"
)

// observed is a projector that records the runner's Committed calls, and
// whether the batch's checkpoint was visible to another connection when
// each came.
type observed struct {
	name    string
	fail    error
	calls   []bool
	visible []bool
	check   func() bool
}

func (o *observed) Name() string     { return o.name }
func (o *observed) Schema() string   { return `SELECT 1` }
func (o *observed) Tables() []string { return nil }
func (o *observed) Apply(context.Context, pgx.Tx, []eventstore.RecordedEvent) error {
	return o.fail
}
func (o *observed) Committed(ok bool) {
	o.calls = append(o.calls, ok)
	o.visible = append(o.visible, o.check())
}

// TestApplyBatchTellsTheCommitObserver: applyBatch tells a CommitObserver
// once per Apply whether the batch committed, and says true only once the
// commit is done. The webhooks subscriber hands leased attempts to its
// dispatcher on true: told true for a batch that rolled back, it would send
// attempts of rows that were never stored, and send them again, as the
// same attempt 1, when the batch is applied again.
func TestApplyBatchTellsTheCommitObserver(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	o := &observed{name: "commit_observer_test"}
	if _, err := prepare(ctx, e.pool, o); err != nil {
		t.Fatal(err)
	}
	var want eventstore.Position
	o.check = func() bool {
		return checkpointOf(t, e.pool, o.name) == want
	}
	batch := []eventstore.RecordedEvent{{Position: eventstore.Position{Commit: 10, Prepare: 10}}}
	o.fail = errors.New("apply fails")
	want = batch[0].Position
	if _, err := applyBatch(ctx, e.pool, o, eventstore.Start, batch); err == nil {
		t.Fatal("applyBatch: no error from a failing Apply")
	}
	o.fail = nil
	if _, err := applyBatch(ctx, e.pool, o, eventstore.Start, batch); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.calls, []bool{false, true}) || !slices.Equal(o.visible, []bool{false, true}) {
		t.Fatalf("Committed calls %v, checkpoint visible at each %v; want [false true], [false true]", o.calls, o.visible)
	}
}
