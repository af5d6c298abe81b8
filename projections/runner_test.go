package projections

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/pgtest"
)

func TestBatchAndCheckpointAreAtomic(t *testing.T) {
	e := newEnv(t)
	c := newCounter("atomic")
	// One batch of 10 events (Subscribe delivers them together); the 6th fails
	// after its rows and the rows of the 5 before it were written.
	var ids []string
	var last eventstore.Position
	for i := 0; i < 10; i++ {
		last = appendEvents(t, e.store, 1, 3)
	}
	visible(t, e.store, last)
	events, err := e.store.ReadAll(context.Background(), eventstore.Start, 100)
	if err != nil || len(events) != 10 {
		t.Fatalf("ReadAll: %d events, %v", len(events), err)
	}
	for _, ev := range events {
		ids = append(ids, ev.ID.String())
	}
	fail := func(ev eventstore.RecordedEvent) bool { return ev.ID.String() == ids[5] }
	c.failOn.Store(&fail)

	r := testRunner(e.store, e.pool, e.log, c)
	r.RetryBackoff = 20 * time.Millisecond
	r.ParkAfter = 1 << 30 // retried until it recovers, never parked
	start(t, r)

	waitUntil(t, 10*time.Second, "the failure to show in Status", func() bool {
		st, err := Status(context.Background(), e.pool, e.store, c)
		return err == nil && st[0].LastError != ""
	})
	st, err := r.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The batch failed whole; the runner then applied it an event at a
	// time, each with its checkpoint, up to the one that fails.
	if st[0].Checkpoint != events[4].Position || st[0].Lag != 5 || st[0].LastErrorAt == nil {
		t.Fatalf("status after failure: %+v", st[0])
	}
	if n := count(t, e.pool, `SELECT count(*) FROM atomic_seen`); n != 5 {
		t.Fatalf("%d rows persisted, want the 5 events before the failing one", n)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM atomic_seen WHERE event_id = '`+ids[5]+`'`); n != 0 {
		t.Fatalf("%d rows of the failing event persisted", n)
	}
	r.WaitTimeout = 300 * time.Millisecond
	if err := r.WaitFor(context.Background(), events[5].Position); !errors.Is(err, ErrLagging) {
		t.Fatalf("WaitFor during failures: %v", err)
	}
	r.WaitTimeout = 30 * time.Second

	c.failOn.Store(nil)
	if err := r.WaitFor(context.Background(), events[9].Position); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, e.pool, c, 10)
	st, err = Status(context.Background(), e.pool, e.store, c)
	if err != nil {
		t.Fatal(err)
	}
	if st[0].LastError != "" || st[0].Lag != 0 || !st[0].Active {
		t.Fatalf("status after recovery: %+v", st[0])
	}
}

func TestRestartResumesExactly(t *testing.T) {
	e := newEnv(t)
	c := newCounter("restart")
	first := appendEvents(t, e.store, 20, 4)
	r := testRunner(e.store, e.pool, e.log, c)
	stop := start(t, r)
	if err := r.WaitFor(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	// Stop in the middle of a stream of appends.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); appendEvents(t, e.store, 30, 4) }()
	time.Sleep(20 * time.Millisecond)
	stop()
	wg.Wait()
	last := appendEvents(t, e.store, 10, 4)

	r2 := testRunner(e.store, e.pool, e.log, c)
	start(t, r2)
	if err := r2.WaitFor(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, e.pool, c, 60)
}

func TestTwoRunnersApplyEachEventOnce(t *testing.T) {
	e := newEnv(t)
	c1, c2 := newCounter("twin"), newCounter("twin") // same projector, two processes
	poolB, storeB := openStore(t, e.url)

	a := testRunner(e.store, e.pool, e.log, c1)
	a.LockRetry = 50 * time.Millisecond
	stopA := start(t, a)
	waitUntil(t, 5*time.Second, "runner A to become active", func() bool {
		st, err := Status(context.Background(), e.pool, e.store, c1)
		return err == nil && st[0].Active
	})
	b := testRunner(storeB, poolB, e.log, c2)
	b.LockRetry = 50 * time.Millisecond
	start(t, b)

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		last eventstore.Position
	)
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				p := appendEvents(t, []eventstore.Store{e.store, storeB}[w%2], 10, 5)
				mu.Lock()
				if last.Less(p) {
					last = p
				}
				mu.Unlock()
			}
		}(w)
	}
	time.Sleep(100 * time.Millisecond)
	stopA() // fail over to B while writers append
	wg.Wait()
	if err := b.WaitFor(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, e.pool, c1, 300)
	b.mu.Lock()
	tookOver := b.states[0].local
	b.mu.Unlock()
	if !tookOver {
		t.Fatal("runner B did not take over after A stopped")
	}
}

// Two appliers without the advisory lock (as after a lock connection died
// while its runner was mid-batch) still apply every event once.
func TestOverlappingAppliersResync(t *testing.T) {
	e := newEnv(t)
	c := newCounter("overlap")
	head := visible(t, e.store, appendBulk(t, e.store, 600, 7))
	applyConcurrently(t, e, c, head, 7, 13, 19, 25)
	checkExactlyOnce(t, e.pool, c, 600)
	if got := checkpointOf(t, e.pool, c.name); got != head {
		t.Fatalf("checkpoint %s, want head %s", got, head)
	}
}

func TestWaitFor(t *testing.T) {
	e := newEnv(t)
	c := newCounter("wait")
	r := testRunner(e.store, e.pool, e.log, c)
	if err := r.WaitFor(context.Background(), eventstore.Start); err != nil {
		t.Fatalf("zero position: %v", err)
	}
	stop := start(t, r)
	for i := 0; i < 20; i++ {
		res := appendEvents(t, e.store, 1, 3)
		if err := r.WaitFor(context.Background(), res); err != nil {
			t.Fatal(err)
		}
		// Read after write: the event is in the read model now.
		if n := count(t, e.pool, `SELECT count(*) FROM wait_seen WHERE commit_pos = $1 AND prepare_pos = $2`,
			int64(res.Commit), int64(res.Prepare)); n != 1 {
			t.Fatalf("event at %s not projected after WaitFor", res)
		}
	}
	stop()
	pos := appendEvents(t, e.store, 1, 3)
	r.WaitTimeout = 200 * time.Millisecond
	began := time.Now()
	err := r.WaitFor(context.Background(), pos)
	if !errors.Is(err, ErrLagging) {
		t.Fatalf("WaitFor with the projector stopped: %v", err)
	}
	if d := time.Since(began); d < 200*time.Millisecond || d > 2*time.Second {
		t.Fatalf("timed out after %v", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.WaitFor(ctx, pos); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled WaitFor: %v", err)
	}
}

// A runner that stands by (its projectors are active in another process)
// learns the progress by polling; many concurrent waits stay cheap.
func TestWaitForManyWaitersLocalAndStandby(t *testing.T) {
	e := newEnv(t)
	c := newCounter("many")
	active := testRunner(e.store, e.pool, e.log, c)
	start(t, active)
	waitUntil(t, 5*time.Second, "active runner", func() bool {
		st, err := Status(context.Background(), e.pool, e.store, c)
		return err == nil && st[0].Active
	})
	poolB, storeB := openStore(t, e.url)
	standby := testRunner(storeB, poolB, e.log, newCounter("many"))
	start(t, standby)

	const waiters = 1000
	began := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 2*waiters)
	for i := 0; i < waiters/10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pos := appendEvents(t, e.store, 1, 10)
			var inner sync.WaitGroup
			for j := 0; j < 10; j++ {
				inner.Add(2)
				go func() { defer inner.Done(); errs <- active.WaitFor(context.Background(), pos) }()
				go func() { defer inner.Done(); errs <- standby.WaitFor(context.Background(), pos) }()
			}
			inner.Wait()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d appends and %d waits in %v", waiters/10, 2*waiters, time.Since(began))
	checkExactlyOnce(t, e.pool, c, waiters/10)

	// The standby never applied anything itself.
	standby.mu.Lock()
	local := standby.states[0].local
	standby.mu.Unlock()
	if local {
		t.Fatal("standby runner became active while the other held the lock")
	}
}

func TestCatchUp(t *testing.T) {
	e := newEnv(t)
	c := newCounter("catchup")
	last := visible(t, e.store, appendBulk(t, e.store, 2500, 5))
	if err := CatchUp(context.Background(), e.store, e.pool, e.log, c); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, e.pool, c, 2500)
	if got := checkpointOf(t, e.pool, c.name); got != last {
		t.Fatalf("checkpoint %s, want head %s", got, last)
	}
	// Nothing new: a second catch-up is a no-op.
	if err := CatchUp(context.Background(), e.store, e.pool, e.log, c); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, e.pool, c, 2500)
}

func TestCatchUpWhileRunnerRuns(t *testing.T) {
	e := newEnv(t)
	c := newCounter("busy")
	r := testRunner(e.store, e.pool, e.log, c)
	start(t, r)
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg   sync.WaitGroup
		last eventstore.Position
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			last = appendEvents(t, e.store, 5, 3)
		}
	}()
	for i := 0; i < 5; i++ {
		time.Sleep(30 * time.Millisecond)
		head, err := e.store.Head(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// Concurrent catch-ups from "operator processes" too.
		var inner sync.WaitGroup
		for j := 0; j < 2; j++ {
			inner.Add(1)
			go func() {
				defer inner.Done()
				if err := CatchUp(context.Background(), e.store, e.pool, e.log, c); err != nil {
					t.Error(err)
				}
			}()
		}
		inner.Wait()
		if got := checkpointOf(t, e.pool, c.name); got.Less(head) {
			t.Fatalf("CatchUp returned at %s before head %s", got, head)
		}
	}
	cancel()
	wg.Wait()
	if err := r.WaitFor(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, e.pool, c, 1)
}

func TestRunRejectsDuplicateNames(t *testing.T) {
	e := newEnv(t)
	r := testRunner(e.store, e.pool, e.log, newCounter("dup"), newCounter("dup"))
	if err := r.Run(context.Background()); err == nil {
		t.Fatal("Run accepted two projectors with one name")
	}
}

// TestCatchUpToWaitsForItsOwnWrite: an older transaction appending to the
// log that is still open holds a just-committed event back from readers. CatchUpTo the
// event's position must not return before the event is projected (CatchUp
// to "the head as of the call" would stop short of it).
func TestCatchUpToWaitsForItsOwnWrite(t *testing.T) {
	e := newEnv(t)
	c := newCounter("own")
	ctx := context.Background()
	_, endBlocker := pgtest.OpenLogWriter(t, e.pool.Config().ConnString())
	pos := appendEvents(t, e.store, 3, 1)
	if head, err := e.store.Head(ctx); err != nil || !head.Less(pos) {
		t.Fatalf("the write should not be readable yet: head %s, pos %s, %v", head, pos, err)
	}
	done := make(chan error, 1)
	go func() { done <- CatchUpTo(ctx, e.store, e.pool, e.log, pos, c) }()
	select {
	case err := <-done:
		t.Fatalf("CatchUpTo returned while its position was unreadable: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	endBlocker()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := checkpointOf(t, e.pool, c.name); got.Less(pos) {
		t.Fatalf("checkpoint %s short of %s", got, pos)
	}
	checkExactlyOnce(t, e.pool, c, 3)
}

// TestCatchUpWhenTheHolderStopsShort: a catch-up that finds the projector's
// lock held waits for the holder, but the holder may stop short of the
// catch-up's target and let go (another operator command catching up to
// an earlier write, as two CLI commands at once do): the catch-up then
// takes the lock and applies the rest itself, instead of waiting 30 s for
// a checkpoint nobody moves and failing with ErrLagging.
func TestCatchUpWhenTheHolderStopsShort(t *testing.T) {
	e := newEnv(t)
	c := newCounter("short")
	ctx := context.Background()
	visible(t, e.store, appendEvents(t, e.store, 2, 1))
	holder, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock(`+lockKeySQL+`)`, c.name); err != nil {
		t.Fatal(err)
	}
	pos := visible(t, e.store, appendEvents(t, e.store, 3, 1))
	done := make(chan error, 1)
	go func() { done <- CatchUpTo(ctx, e.store, e.pool, e.log, pos, c) }()
	select {
	case err := <-done:
		t.Fatalf("CatchUpTo returned while another session held the lock and nothing was applied: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	// The holder lets go without having moved the checkpoint.
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock(`+lockKeySQL+`)`, c.name); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("CatchUpTo still waits for a checkpoint nobody moves")
	}
	if got := checkpointOf(t, e.pool, c.name); got.Less(pos) {
		t.Fatalf("checkpoint %s short of %s", got, pos)
	}
	checkExactlyOnce(t, e.pool, c, 5)
}
