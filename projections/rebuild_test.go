package projections

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/eventstore"
)

func TestRebuildWhileRunnerRunsAndWritersAppend(t *testing.T) {
	e := newEnv(t)
	c := newCounter("rb")
	head := visible(t, e.store, appendBulk(t, e.store, 7000, 6))
	r := testRunner(e.store, e.pool, e.log, c)
	start(t, r)
	if err := r.WaitFor(context.Background(), head); err != nil {
		t.Fatal(err)
	}
	// Damage the live read model: the rebuild must repair it.
	if _, err := e.pool.Exec(context.Background(), `DELETE FROM rb_counts WHERE stream = 's-1'`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(context.Background(), `UPDATE rb_counts SET n = n + 100 WHERE stream = 's-2'`); err != nil {
		t.Fatal(err)
	}
	var oldOID uint32
	if err := e.pool.QueryRow(context.Background(), `SELECT 'rb_counts'::regclass::oid`).Scan(&oldOID); err != nil {
		t.Fatal(err)
	}

	// Writers append throughout, and readers keep querying the live tables
	// (with cached prepared statements) as the API would.
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		last eventstore.Position
	)
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				p := appendEvents(t, e.store, 1, 9)
				mu.Lock()
				if last.Less(p) {
					last = p
				}
				mu.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			var n int64
			if err := e.pool.QueryRow(ctx, `SELECT coalesce(sum(n), 0) FROM rb_counts WHERE stream <> $1`, "x").Scan(&n); err != nil && ctx.Err() == nil {
				t.Errorf("reader during rebuild: %v", err)
				return
			}
		}
	}()

	var (
		calls         int
		lastDone      int64
		firstTotal    int64
		nonMonotonous bool
	)
	err := Rebuild(context.Background(), e.pool, e.store, c, e.log, func(done, total int64) {
		if calls == 0 {
			firstTotal = total
		}
		calls++
		if done < lastDone || done > total {
			nonMonotonous = true
		}
		lastDone = done
	})
	if err != nil {
		t.Fatal(err)
	}
	// Keep writing for a while after the swap: the live runner goes on.
	time.Sleep(300 * time.Millisecond)
	cancel()
	wg.Wait()
	if err := r.WaitFor(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, e.pool, c, 7000)

	var newOID uint32
	if err := e.pool.QueryRow(context.Background(), `SELECT 'rb_counts'::regclass::oid`).Scan(&newOID); err != nil {
		t.Fatal(err)
	}
	if newOID == oldOID {
		t.Fatal("live table was not replaced")
	}
	if firstTotal < 7000 || lastDone < firstTotal || nonMonotonous || calls < 4 {
		t.Fatalf("progress: %d calls, first total %d, last done %d, monotonous %v", calls, firstTotal, lastDone, !nonMonotonous)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, ShadowSchema(c.name)); n != 0 {
		t.Fatal("shadow schema left behind")
	}
	// Indexes moved with their tables.
	if n := count(t, e.pool, `SELECT count(*) FROM pg_indexes WHERE schemaname = 'public' AND indexname = 'rb_seen_event'`); n != 1 {
		t.Fatal("index did not move with its table")
	}
	st, err := Status(context.Background(), e.pool, e.store, c)
	if err != nil || st[0].LastError != "" {
		t.Fatalf("status after rebuild: %+v, %v", st, err)
	}
}

func TestRebuildWithoutRunnerAndConcurrentRebuildRefused(t *testing.T) {
	e := newEnv(t)
	c := newCounter("solo")
	head := visible(t, e.store, appendBulk(t, e.store, 500, 3))
	if err := Rebuild(context.Background(), e.pool, e.store, c, nil, nil); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, e.pool, c, 500)
	if got := checkpointOf(t, e.pool, c.name); got != head {
		t.Fatalf("checkpoint %s, want %s", got, head)
	}
	// A rebuild of an empty log leaves an empty model.
	e2 := newEnv(t)
	if err := Rebuild(context.Background(), e2.pool, e2.store, c, nil, nil); err != nil {
		t.Fatal(err)
	}
	if n := count(t, e2.pool, `SELECT count(*) FROM solo_seen`); n != 0 {
		t.Fatalf("%d rows after rebuilding an empty log", n)
	}

	conn, err := e.pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(context.Background(), `SELECT pg_advisory_lock(hashtext('rebuild:' || $1))`, c.name); err != nil {
		t.Fatal(err)
	}
	if err := Rebuild(context.Background(), e.pool, e.store, c, nil, nil); !errors.Is(err, ErrRebuildRunning) {
		t.Fatalf("second rebuild: %v", err)
	}
	_, _ = conn.Exec(context.Background(), `SELECT pg_advisory_unlock_all()`)
}

// The rebuild relies on PostgreSQL re-resolving unqualified names of cached
// prepared statements (pgx's default statement cache) when search_path or the
// referenced tables change: a connection that applied events into a shadow
// schema must write to the live tables afterwards, and to the moved-in tables
// after a swap.
func TestCachedStatementsFollowSearchPathAndSwap(t *testing.T) {
	e := newEnv(t)
	c := newCounter("pc")
	cfg := e.pool.Config()
	cfg.MaxConns = 1
	one, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	ctx := context.Background()
	if _, err := prepare(ctx, one, c); err != nil {
		t.Fatal(err)
	}
	visible(t, e.store, appendEvents(t, e.store, 3, 3))
	events, err := e.store.ReadAll(ctx, eventstore.Start, 10)
	if err != nil {
		t.Fatal(err)
	}
	apply := func(searchPath string, evs []eventstore.RecordedEvent) {
		t.Helper()
		err := pgx.BeginFunc(ctx, one, func(tx pgx.Tx) error {
			if searchPath != "" {
				if _, err := tx.Exec(ctx, `SET LOCAL search_path TO `+searchPath); err != nil {
					return err
				}
			}
			return c.Apply(ctx, tx, evs)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	apply("", events[:1]) // prepares the statements against public
	if _, err := one.Exec(ctx, `CREATE SCHEMA shadow_pc`); err != nil {
		t.Fatal(err)
	}
	apply("shadow_pc", nil)
	if _, err := one.Exec(ctx, `SET search_path TO shadow_pc; `+c.Schema()+`; RESET search_path`); err != nil {
		t.Fatal(err)
	}
	apply("shadow_pc, public", events[1:2])
	apply("", events[2:3])
	if n := count(t, e.pool, `SELECT count(*) FROM public.pc_seen`); n != 2 {
		t.Fatalf("public has %d rows, want 2", n)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM shadow_pc.pc_seen`); n != 1 {
		t.Fatalf("shadow has %d rows, want 1", n)
	}
	// Swap the shadow in: the same cached statements must hit the new table.
	if _, err := one.Exec(ctx, `DROP TABLE public.pc_seen, public.pc_counts;
		ALTER TABLE shadow_pc.pc_seen SET SCHEMA public; ALTER TABLE shadow_pc.pc_counts SET SCHEMA public`); err != nil {
		t.Fatal(err)
	}
	apply("", events)
	if n := count(t, e.pool, `SELECT count(*) FROM public.pc_seen`); n != 4 {
		t.Fatalf("after swap public has %d rows, want 4", n)
	}
}
