package projections

import (
	"context"
	"sync"
	"testing"

	"github.com/escrowd/escrowd/eventstore"
)

// interested is a counter that only reads streams starting with "s-1".
type interested struct{ *countProjector }

func (interested) StreamPrefixes() []string { return []string{"s-1"} }

// Batches that hold nothing for a projector only move its checkpoint, and
// racing appliers still apply every relevant event exactly once and agree on
// the checkpoint.
func TestUninterestingBatchesOnlyMoveTheCheckpoint(t *testing.T) {
	e := newEnv(t)
	c := interested{newCounter("picky")}
	// Streams s-0 .. s-6, in appends of 100 events.
	head := visible(t, e.store, appendBulk(t, e.store, 700, 7))
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(batch int) {
			defer wg.Done()
			_, err := applyUpTo(context.Background(), e.store, e.pool, c, head, batch)
			errs <- err
		}(3 + 2*i) // small batches: most hold no s-1 event
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := checkpointOf(t, e.pool, c.name); got != head {
		t.Fatalf("checkpoint %s, want head %s", got, head)
	}
	// Every s-1 event once (a batch with one of them is applied whole, so
	// other events may be seen too, but never twice).
	s1, err := e.store.ReadStream(context.Background(), "s-1", 0, 10000)
	if err != nil || len(s1) == 0 {
		t.Fatalf("s-1: %d events, %v", len(s1), err)
	}
	if n := count(t, e.pool, `SELECT count(DISTINCT event_id) FROM picky_seen WHERE stream = 's-1'`); n != int64(len(s1)) {
		t.Fatalf("%d s-1 events applied, want %d", n, len(s1))
	}
	if all, distinct := count(t, e.pool, `SELECT count(*) FROM picky_seen`),
		count(t, e.pool, `SELECT count(DISTINCT event_id) FROM picky_seen`); all != distinct {
		t.Fatalf("%d applications of %d events: some applied twice", all, distinct)
	}
	// A stale applier's skip is refused, not applied over a moved checkpoint.
	if err := skipBatch(context.Background(), e.pool, c.name, eventstore.Start, head); err != errResync {
		t.Fatalf("stale skip: %v, want errResync", err)
	}
}
