package projections

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

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
	applyConcurrently(t, e, c, head, 3, 5, 7, 9) // small batches: most hold no s-1 event
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
	// And only the batches holding an s-1 event were applied: the others
	// just moved the checkpoint. appendBulk writes s-1's events as one run
	// of 15 per append (7 appends, one transaction each); the applied batch
	// reaching into a run's start holds at most maxBatch-1 events before it,
	// the one leaving its end at most maxBatch-1 after it, and no batch of
	// at most 9 events reaches two runs (90 other events lie between them).
	// Applying every batch instead would record all 595 other events.
	const maxBatch = 3 + 2*3
	runs := count(t, e.pool, `SELECT count(DISTINCT commit_pos) FROM picky_seen WHERE stream = 's-1'`)
	if runs != 7 {
		t.Fatalf("s-1 events applied from %d appends, want 7", runs)
	}
	if others := count(t, e.pool, `SELECT count(*) FROM picky_seen WHERE stream <> 's-1'`); others > runs*2*(maxBatch-1) {
		t.Fatalf("%d events of other streams applied, want at most %d: batches without an s-1 event were applied",
			others, runs*2*(maxBatch-1))
	}
	// A stale applier's skip is refused, not applied over a moved checkpoint.
	if err := skipBatch(context.Background(), e.pool, c.name, eventstore.Start, head); err != errResync {
		t.Fatalf("stale skip: %v, want errResync", err)
	}
}

// A following projector stores the end of batches it skipped shortly after
// them (or with its next applied batch), not in a transaction per batch; a
// waiter in the same process sees the skip at once, a standby runner in
// another process once it is stored.
func TestSkippedBatchesAreStoredLazily(t *testing.T) {
	e := newEnv(t)
	c := interested{newCounter("lazy")}
	active, standby := activeAndStandby(t, e, c, 0)

	for i := range 30 {
		// s-0 only: nothing for the projector, which reads s-1.
		pos := appendEvents(t, e.store, 1, 1)
		if err := active.WaitFor(context.Background(), pos); err != nil {
			t.Fatal(err)
		}
		if err := standby.WaitFor(context.Background(), pos); err != nil {
			t.Fatalf("standby wait %d: %v", i, err)
		}
		if got := checkpointOf(t, e.pool, c.name); got.Less(pos) {
			t.Fatalf("standby passed %s but the stored checkpoint is %s", pos, got)
		}
	}
	// A relevant event after skipped ones is applied and stored at once.
	appendEvents(t, e.store, 5, 1)
	rel, err := e.store.Append(context.Background(), eventstore.StreamAppend{Stream: "s-1", Expected: eventstore.Any,
		Events: []eventstore.EventData{{ID: uuid.New(), Type: "Tested", Data: []byte(`{}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := active.WaitFor(context.Background(), rel.Position); err != nil {
		t.Fatal(err)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM lazy_seen WHERE stream = 's-1'`); n != 1 {
		t.Fatalf("%d s-1 events applied, want 1", n)
	}
	if got := checkpointOf(t, e.pool, c.name); got.Less(rel.Position) {
		t.Fatalf("stored checkpoint %s after an applied batch ending at %s", got, rel.Position)
	}
	// And a skip still pending from before that batch, flushed later, never
	// moves it back.
	waitFlushed(t, active)
	if got := checkpointOf(t, e.pool, c.name); got != rel.Position {
		t.Fatalf("stored checkpoint %s after the flush delay, want %s (it moved back)", got, rel.Position)
	}
}

// Under a steady stream of skipped batches, closer together than the flush
// delay, the position is still stored every delay: a standby's waiter is
// answered while the stream goes on (it was not, when each skip pushed the
// flush back).
func TestSkipsAreStoredDuringASteadyStream(t *testing.T) {
	e := newEnv(t)
	c := interested{newCounter("steady")}
	_, standby := activeAndStandby(t, e, c, 100*time.Millisecond)
	// Fifty flush delays: enough for a loaded CI host, and a flush pushed
	// back by every skip still never answers (the stream does not stop).
	standby.WaitTimeout = 5 * time.Second
	first := appendEvents(t, e.store, 1, 1)
	stop := make(chan struct{})
	writing := make(chan struct{})
	go func() {
		defer close(writing)
		for {
			select {
			case <-stop:
				return
			default:
			}
			appendEvents(t, e.store, 1, 1)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	err := standby.WaitFor(context.Background(), first)
	select {
	case <-writing:
		t.Fatal("the writer stopped early")
	default:
	}
	close(stop)
	<-writing
	if err != nil {
		t.Fatalf("standby wait during a steady stream of skips: %v", err)
	}
}

// With a long flush delay the skipped position stays in memory (the
// laziness), and stopping the runner stores it.
func TestStoppingStoresSkippedPosition(t *testing.T) {
	e := newEnv(t)
	c := interested{newCounter("stopping")}
	active := testRunner(e.store, e.pool, e.log, c)
	active.SkipFlushDelay = time.Hour
	stop := start(t, active)
	waitUntil(t, 5*time.Second, "active runner", func() bool {
		st, err := Status(context.Background(), e.pool, e.store, c)
		return err == nil && st[0].Active
	})
	before := checkpointOf(t, e.pool, c.name)
	last := visible(t, e.store, appendEvents(t, e.store, 3, 1))
	if err := active.WaitFor(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	if got := checkpointOf(t, e.pool, c.name); got != before {
		t.Fatalf("stored checkpoint moved to %s within the flush delay (was %s)", got, before)
	}
	stop()
	if got := checkpointOf(t, e.pool, c.name); got != last {
		t.Fatalf("stored checkpoint %s after stop, want %s", got, last)
	}
}

// activeAndStandby starts a runner of p that becomes active (with the given
// flush delay, 0 for the default) and a standby runner of the same
// projector over another pool, as a second process.
func activeAndStandby(t *testing.T, e *env, p interested, delay time.Duration) (active, standby *Runner) {
	t.Helper()
	active = testRunner(e.store, e.pool, e.log, p)
	active.SkipFlushDelay = delay
	start(t, active)
	waitUntil(t, 5*time.Second, "active runner", func() bool {
		st, err := Status(context.Background(), e.pool, e.store, p)
		return err == nil && st[0].Active
	})
	poolB, storeB := openStore(t, e.url)
	standby = testRunner(storeB, poolB, e.log, interested{newCounter(p.name)})
	start(t, standby)
	return active, standby
}

func TestProjectorNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"ledger", true}, {"webhooks", true}, {"a1_b-c", true},
		{"", false}, {"Ledger", false}, {"1st", false}, {"it's", false}, {"a b", false}, {"a;b", false},
	} {
		err := checkNames([]Projector{newCounter(tc.name)})
		if (err == nil) != tc.ok {
			t.Errorf("checkNames(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	if err := checkNames([]Projector{newCounter("dup"), newCounter("dup")}); err == nil {
		t.Error("checkNames accepted one name twice")
	}
}

// A skip is pending exactly while it ends past the stored checkpoint: an
// applied batch that stored past it leaves nothing to store (store would
// reach the database, which this checkpointer has none of, if it tried).
func TestCheckpointerPendingIsDerived(t *testing.T) {
	at := func(n uint64) eventstore.Position { return eventstore.Position{Commit: 7, Prepare: n} }
	c := &checkpointer{stored: at(5)}
	if c.pending() {
		t.Fatal("pending before any skip")
	}
	c.target = at(8)
	if !c.pending() {
		t.Fatal("a skip past the stored checkpoint is not pending")
	}
	c.stored = at(9) // an applied batch stored its own end, past the skip
	if c.pending() {
		t.Fatal("a skip behind the stored checkpoint is still pending")
	}
	c.store(context.Background())
	if c.stored != at(9) {
		t.Fatalf("store moved the checkpoint back to %s", c.stored)
	}
}

// A skipped position whose store failed is tried again after the flush
// delay, not only at the next skip: an idle projector's stored checkpoint,
// which other processes read for its lag, catches up once the database
// takes the write again, with no further event.
func TestFailedSkipFlushIsRetried(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := interested{newCounter("flushretry")}
	active := testRunner(e.store, e.pool, e.log, c)
	active.SkipFlushDelay = 20 * time.Millisecond
	start(t, active)
	waitUntil(t, 5*time.Second, "active runner", func() bool {
		st, err := Status(ctx, e.pool, e.store, c)
		return err == nil && st[0].Active
	})
	// Moves of this projector's checkpoint fail while flushretry_fail has
	// a row; each failed move takes a number of flushretry_tries (which
	// the failing transaction's rollback does not give back).
	if _, err := e.pool.Exec(ctx, `
CREATE SEQUENCE flushretry_tries;
CREATE TABLE flushretry_fail (x int);
INSERT INTO flushretry_fail VALUES (1);
CREATE FUNCTION flushretry_fail() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.name = 'flushretry' AND (NEW.commit_pos, NEW.prepare_pos) IS DISTINCT FROM (OLD.commit_pos, OLD.prepare_pos)
     AND EXISTS (SELECT 1 FROM flushretry_fail) THEN
    PERFORM nextval('flushretry_tries');
    RAISE EXCEPTION 'checkpoint writes failing (test)';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER flushretry_fail BEFORE UPDATE ON projection_checkpoints
  FOR EACH ROW EXECUTE FUNCTION flushretry_fail();`); err != nil {
		t.Fatal(err)
	}
	before := checkpointOf(t, e.pool, c.name)
	last := visible(t, e.store, appendEvents(t, e.store, 3, 1))
	if err := active.WaitFor(ctx, last); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "a failed store of the skipped position", func() bool {
		var tried bool
		return e.pool.QueryRow(ctx, `SELECT is_called FROM flushretry_tries`).Scan(&tried) == nil && tried
	})
	if got := checkpointOf(t, e.pool, c.name); got != before {
		t.Fatalf("stored checkpoint %s while writes fail, want it still at %s", got, before)
	}
	if _, err := e.pool.Exec(ctx, `DELETE FROM flushretry_fail`); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the skipped position stored without another event", func() bool {
		return checkpointOf(t, e.pool, c.name) == last
	})
}

// Catch-up and a closing projector store a skipped position with
// skipBatch, which waits for a checkpoint row another transaction holds
// (a rebuild's swap, an overlapping applier) and then moves it. Only the
// runner's flusher, whose one statement serves every projector, leaves
// such a row for its next round: a skipBatch that did the same would
// report a skip it could not store as a resync.
func TestSkipBatchWaitsForAHeldCheckpoint(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := interested{newCounter("held")}
	head := visible(t, e.store, appendBulk(t, e.store, 10, 1))
	if err := ensureCheckpoint(ctx, e.pool, c.name); err != nil {
		t.Fatal(err)
	}
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM projection_checkpoints WHERE name = $1 FOR UPDATE`, c.name); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- skipBatch(ctx, e.pool, c.name, eventstore.Start, head) }()
	// It waits on the row's lock (seen by the server), not returning.
	for deadline := time.Now().Add(10 * time.Second); ; {
		select {
		case err := <-done:
			t.Fatalf("skipBatch returned (%v) while the row was held", err)
		default:
		}
		if count(t, e.pool, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%projection_checkpoints%' AND pid <> pg_backend_pid()`) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("skipBatch never waited for the held row")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("skipBatch once the row was free: %v", err)
	}
	if got := checkpointOf(t, e.pool, c.name); got != head {
		t.Fatalf("checkpoint %s, want %s", got, head)
	}
}
