package projections

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/eventstore"
)

// picky is a counter projector under its own name that reads only streams
// starting with "s-1", like interested.
func picky(name string) interested { return interested{newCounter(name)} }

// startActive starts a runner of ps with the given flush delay and waits
// until it is active for all of them.
// waitFlushed waits until r's skip flusher has nothing armed and no flush
// under way: every skip r recorded before has been stored, or found
// overtaken by another write.
func waitFlushed(t *testing.T, r *Runner) {
	t.Helper()
	waitUntil(t, 10*time.Second, "the skips flushed", func() bool {
		f := &r.skips
		f.mu.Lock()
		defer f.mu.Unlock()
		return !f.armed && f.flushing == 0
	})
}

func startActive(t *testing.T, e *env, delay time.Duration, ps ...Projector) *Runner {
	t.Helper()
	r := testRunner(e.store, e.pool, e.log, ps...)
	r.SkipFlushDelay = delay
	start(t, r)
	// Active (the session lock) comes before the projector's checkpoint
	// row exists: wait for both, so a test can lock the rows.
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name()
	}
	waitUntil(t, 5*time.Second, "active runner", func() bool {
		st, err := Status(context.Background(), e.pool, e.store, ps...)
		if err != nil {
			return false
		}
		for _, s := range st {
			if !s.Active {
				return false
			}
		}
		var rows int
		if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM projection_checkpoints WHERE name = ANY ($1)`,
			names).Scan(&rows); err != nil {
			return false
		}
		return rows == len(ps)
	})
	return r
}

// The skipped positions of several projectors are stored by one statement,
// not one round trip each.
func TestSkipsOfAllProjectorsAreStoredTogether(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// Every statement updating checkpoints records the names it moved.
	if _, err := e.pool.Exec(ctx, `
CREATE TABLE skipflush_statements (names text[] NOT NULL);
CREATE FUNCTION skipflush_record() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO skipflush_statements SELECT array_agg(name ORDER BY name) FROM moved HAVING count(*) > 0;
  RETURN NULL;
END $$;
CREATE TRIGGER skipflush_record AFTER UPDATE ON projection_checkpoints
  REFERENCING NEW TABLE AS moved FOR EACH STATEMENT EXECUTE FUNCTION skipflush_record();`); err != nil {
		t.Fatal(err)
	}
	ps := []Projector{picky("flush_a"), picky("flush_b"), picky("flush_c")}
	r := startActive(t, e, 300*time.Millisecond, ps...)
	if _, err := e.pool.Exec(ctx, `TRUNCATE skipflush_statements`); err != nil {
		t.Fatal(err)
	}
	// s-0 only: a batch every projector skips.
	pos := visible(t, e.store, appendEvents(t, e.store, 3, 1))
	if err := r.WaitFor(ctx, pos); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "skips stored", func() bool {
		for _, p := range ps {
			if checkpointOf(t, e.pool, p.Name()).Less(pos) {
				return false
			}
		}
		return true
	})
	rows, err := e.pool.Query(ctx, `SELECT names FROM skipflush_statements`)
	if err != nil {
		t.Fatal(err)
	}
	var stmts [][]string
	for rows.Next() {
		var names []string
		if err := rows.Scan(&names); err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts, names)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"flush_a", "flush_b", "flush_c"}
	if !slices.ContainsFunc(stmts, func(names []string) bool { return slices.Equal(names, want) }) {
		t.Fatalf("statements moving checkpoints moved %v; want one moving all of %v", stmts, want)
	}
}

// A checkpoint row another transaction holds (a rebuild's swap, an
// overlapping applier in another process) does not hold up the others'
// flush, and is stored once it is free, with no further event.
//
// The row is locked only once the events are readable: a transaction
// holding a row lock has an id, and the log shows no event committed after
// it started until it ends. The flush delay leaves time for it.
func TestLockedCheckpointDoesNotHoldUpTheOthers(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ps := []Projector{picky("held_a"), picky("held_b"), picky("held_c")}
	const delay = 500 * time.Millisecond
	r := startActive(t, e, delay, ps...)
	before := checkpointOf(t, e.pool, "held_b")
	pos := visible(t, e.store, appendEvents(t, e.store, 3, 1))
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	locked := time.Now()
	var one int
	if err := tx.QueryRow(ctx, `SELECT 1 FROM projection_checkpoints WHERE name = 'held_b' FOR UPDATE`).Scan(&one); err != nil {
		t.Fatal(err) // no row: nothing would be locked
	}
	if got := checkpointOf(t, e.pool, "held_b"); got != before {
		t.Skipf("the flush came before the lock (%s after the events were readable)", time.Since(locked))
	}
	if err := r.WaitFor(ctx, pos); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the free checkpoints stored", func() bool {
		return !checkpointOf(t, e.pool, "held_a").Less(pos) && !checkpointOf(t, e.pool, "held_c").Less(pos)
	})
	if got := checkpointOf(t, e.pool, "held_b"); got != before {
		t.Fatalf("locked checkpoint moved to %s", got)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the released checkpoint stored", func() bool {
		return !checkpointOf(t, e.pool, "held_b").Less(pos)
	})
}

// stalling is a counter reading only streams starting with "s-2" whose
// Apply, once entered, waits for release: a projector in the middle of a
// batch (a slow write, a checkpoint row a rebuild's swap holds).
type stalling struct {
	*countProjector
	entered chan struct{}
	release chan struct{}
}

func (stalling) StreamPrefixes() []string { return []string{"s-2"} }

func (s stalling) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.countProjector.Apply(ctx, tx, events)
}

// A projector busy applying a batch does not hold up the flush of the
// others' skips, nor (through the flush) their next batches: a flush that
// waited for its lock would keep every other due projector's lock while
// it waits.
func TestBusyProjectorDoesNotHoldUpTheFlush(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	busy := stalling{newCounter("busy_z"), make(chan struct{}, 1), make(chan struct{})}
	idle := picky("busy_a")
	r := startActive(t, e, 200*time.Millisecond, idle, busy)
	var once sync.Once
	release := func() { once.Do(func() { close(busy.release) }) }
	t.Cleanup(release) // before the runner stops
	// A batch both skip: both are due at the next flush.
	skipped := visible(t, e.store, appendEvents(t, e.store, 1, 1))
	if err := r.WaitFor(ctx, skipped); err != nil {
		t.Fatal(err)
	}
	// Then one only busy applies, before the flush comes.
	if _, err := e.store.Append(ctx, eventstore.StreamAppend{Stream: "s-2", Expected: eventstore.Any,
		Events: []eventstore.EventData{{ID: uuid.New(), Type: "Tested", Data: []byte(`{}`)}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-busy.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the busy projector never applied its batch")
	}
	waitUntil(t, 3*time.Second, "the idle projector's skip stored while the other is busy", func() bool {
		return !checkpointOf(t, e.pool, idle.Name()).Less(skipped)
	})
	release()
	waitUntil(t, 5*time.Second, "the busy projector's batch stored", func() bool {
		return count(t, e.pool, `SELECT count(*) FROM busy_z_seen`) == 1
	})
}

// A checkpoint the flush finds moved by someone else (a rebuild's swap)
// makes the projector re-read from it, so that its later skips are stored
// again: a flush that went on expecting its own stored position would
// never store another one, and other processes would see the projector's
// lag grow for as long as it has nothing to apply.
func TestFlushFindingTheCheckpointMovedResyncs(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := picky("moved_a")
	r := startActive(t, e, time.Second, p)
	before := checkpointOf(t, e.pool, p.Name())
	pos := visible(t, e.store, appendEvents(t, e.store, 1, 1))
	if err := r.WaitFor(ctx, pos); err != nil {
		t.Fatal(err)
	}
	// A rebuild swaps its tables in at pos before the flush stores the skip.
	tag, err := e.pool.Exec(ctx, `UPDATE projection_checkpoints SET commit_pos = $2, prepare_pos = $3
		WHERE name = $1 AND commit_pos = $4 AND prepare_pos = $5`, p.Name(),
		toDB(pos.Commit), toDB(pos.Prepare), toDB(before.Commit), toDB(before.Prepare))
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != 1 {
		t.Skip("the flush came before the checkpoint was moved")
	}
	waitFlushed(t, r) // the flush finds it moved
	next := visible(t, e.store, appendEvents(t, e.store, 1, 1))
	if err := r.WaitFor(ctx, next); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the skip after the move stored", func() bool {
		return !checkpointOf(t, e.pool, p.Name()).Less(next)
	})
}
