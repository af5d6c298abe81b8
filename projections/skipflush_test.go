package projections

import (
	"context"
	"slices"
	"testing"
	"time"
)

// picky is a counter projector under its own name that reads only streams
// starting with "s-1", like interested.
func picky(name string) interested { return interested{newCounter(name)} }

// startActive starts a runner of ps with the given flush delay and waits
// until it is active for all of them.
func startActive(t *testing.T, e *env, delay time.Duration, ps ...Projector) *Runner {
	t.Helper()
	r := testRunner(e.store, e.pool, e.log, ps...)
	r.SkipFlushDelay = delay
	start(t, r)
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
		return true
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
	if _, err := tx.Exec(ctx, `SELECT 1 FROM projection_checkpoints WHERE name = 'held_b' FOR UPDATE`); err != nil {
		t.Fatal(err)
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
