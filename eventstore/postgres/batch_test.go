package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/eventstore/storetest"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// TestConformanceGrouped runs the contract with one append call at a time,
// so that appends meeting another in flight go in a group. Every append
// runs through es_append_batch anyway (es_append is a group of one); what this run adds is several appends per call: the
// suite's cases whose concurrent appends touch different streams (gap
// safety: positions and ordering under concurrent commits) then commit in
// groups. Cases whose appends race for one stream are never grouped (the
// queue keeps them apart), so the run checks that groups did form.
func TestConformanceGrouped(t *testing.T) {
	pgtest.ServerURL(t)
	var grouped atomic.Uint64
	t.Run("suite", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) eventstore.Store {
			s, _ := newStore(t)
			s.AppendCalls = 1
			t.Cleanup(func() { grouped.Add(s.AppendStats().Calls) })
			return s
		})
	})
	if !t.Failed() && grouped.Load() == 0 {
		t.Fatal("no case of the suite made a grouped call: the run tested appends alone only")
	}
}

func evs(n int) []eventstore.EventData {
	out := make([]eventstore.EventData, n)
	for i := range out {
		out[i] = eventstore.EventData{ID: uuid.New(), Type: "t", Data: []byte(fmt.Sprintf(`{"i":%d}`, i))}
	}
	return out
}

func one(stream string, expected eventstore.ExpectedRevision, events []eventstore.EventData) eventstore.StreamAppend {
	return eventstore.StreamAppend{Stream: stream, Expected: expected, Events: events}
}

func mustAppend(t *testing.T, s *postgres.Store, a ...eventstore.StreamAppend) eventstore.AppendResult {
	t.Helper()
	res, err := s.Append(context.Background(), a...)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func wantConflict(t *testing.T, err error, stream string, expected eventstore.ExpectedRevision, actual int64) {
	t.Helper()
	var ce *eventstore.ConcurrencyError
	if !errors.As(err, &ce) || ce.Stream != stream || ce.Expected != expected || ce.Actual != actual {
		t.Fatalf("got %v; want a conflict on %q expecting %s, actual %d", err, stream, expected, actual)
	}
}

func streamRevisions(t *testing.T, s *postgres.Store, stream string) []uint64 {
	t.Helper()
	got, err := s.ReadStream(context.Background(), stream, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	revs := []uint64{}
	for _, e := range got {
		revs = append(revs, e.Revision)
	}
	return revs
}

// TestGroupDecidesEachAppendAlone: a group's appends are accepted or
// refused one by one, as es_append alone would decide them; a refused one
// leaves no trace (streams it moved are moved back, streams it created are
// gone) and the others are stored with their own positions.
func TestGroupDecidesEachAppendAlone(t *testing.T) {
	s, _ := newStore(t)
	p := uuid.NewString()[:8] + "-"
	mustAppend(t, s, one(p+"a", eventstore.NoStream, evs(2)))
	mustAppend(t, s, one(p+"b", eventstore.NoStream, evs(1)))
	mustAppend(t, s, one(p+"g", eventstore.NoStream, evs(1)))
	mustAppend(t, s, one(p+"m", eventstore.NoStream, evs(3)))
	mustAppend(t, s, one(p+"y", eventstore.NoStream, evs(1)))
	observed := func(stream string, expected eventstore.ExpectedRevision) eventstore.StreamAppend {
		return eventstore.StreamAppend{Stream: stream, Expected: expected, Observed: true}
	}

	ok1 := []eventstore.StreamAppend{one(p+"a", eventstore.Exact(1), evs(1)), one(p+"n", eventstore.NoStream, evs(2)), observed(p+"m", eventstore.Exact(2))}
	// b moves before z refuses (byte order): b must be moved back.
	refusedExact := []eventstore.StreamAppend{one(p+"b", eventstore.Exact(0), evs(1)), one(p+"z", eventstore.Exact(3), evs(1))}
	// c is created before y refuses: c must be gone again.
	refusedNoStream := []eventstore.StreamAppend{one(p+"c", eventstore.NoStream, evs(1)), one(p+"y", eventstore.NoStream, evs(1))}
	ok2 := []eventstore.StreamAppend{one(p+"d", eventstore.Any, evs(1)), observed(p+"m", eventstore.Exact(2))}
	guard := []eventstore.StreamAppend{{Stream: p + "g", Expected: eventstore.Exact(0)}}
	refusedObserved := []eventstore.StreamAppend{observed(p+"m", eventstore.Exact(7))}
	out := postgres.AppendTogether(s, ok1, refusedExact, refusedNoStream, ok2, guard, refusedObserved)

	if out[0].Err != nil || out[3].Err != nil || out[4].Err != nil {
		t.Fatalf("accepted appends failed: %v, %v, %v", out[0].Err, out[3].Err, out[4].Err)
	}
	wantConflict(t, out[1].Err, p+"z", eventstore.Exact(3), -1)
	wantConflict(t, out[2].Err, p+"y", eventstore.NoStream, 0)
	wantConflict(t, out[5].Err, p+"m", eventstore.Exact(7), 2)

	if want := map[string]uint64{p + "a": 2, p + "n": 1, p + "m": 2}; !reflect.DeepEqual(out[0].Result.Revisions, want) {
		t.Errorf("first append's revisions %v; want %v", out[0].Result.Revisions, want)
	}
	if want := map[string]uint64{p + "d": 0, p + "m": 2}; !reflect.DeepEqual(out[3].Result.Revisions, want) {
		t.Errorf("fourth append's revisions %v; want %v", out[3].Result.Revisions, want)
	}
	if want := map[string]uint64{p + "g": 0}; !reflect.DeepEqual(out[4].Result.Revisions, want) || out[4].Result.Position != eventstore.Start {
		t.Errorf("guard: revisions %v at %v; want %v at the start (it wrote nothing)", out[4].Result.Revisions, out[4].Result.Position, want)
	}

	for stream, want := range map[string][]uint64{
		p + "a": {0, 1, 2}, p + "n": {0, 1}, p + "b": {0}, p + "z": {}, p + "c": {}, p + "y": {0}, p + "d": {0}, p + "g": {0}, p + "m": {0, 1, 2},
	} {
		if got := streamRevisions(t, s, stream); !reflect.DeepEqual(got, want) {
			t.Errorf("stream %s holds revisions %v; want %v", stream, got, want)
		}
	}
	// Each accepted append's position is that of its own last event.
	for _, c := range []struct {
		res    eventstore.AppendResult
		stream string
		rev    uint64
	}{{out[0].Result, p + "n", 1}, {out[3].Result, p + "d", 0}} {
		got, err := s.ReadStream(context.Background(), c.stream, c.rev, 1)
		if err != nil || len(got) != 1 {
			t.Fatalf("read %s@%d: %v %v", c.stream, c.rev, got, err)
		}
		if got[0].Position != c.res.Position {
			t.Errorf("append ending with %s@%d reports position %v; its event is at %v", c.stream, c.rev, c.res.Position, got[0].Position)
		}
	}
	if a, err := s.ReadStream(context.Background(), p+"a", 2, 1); err != nil || a[0].Position.Commit != out[0].Result.Position.Commit || a[0].Position.Prepare > out[0].Result.Position.Prepare {
		t.Errorf("a@2 at %v is not within the first append ending at %v (%v)", a, out[0].Result.Position, err)
	}

	// What the refused appends moved back can be appended again at once:
	// b is at revision 0, c does not exist.
	mustAppend(t, s, one(p+"b", eventstore.Exact(0), evs(1)), one(p+"c", eventstore.NoStream, evs(1)))
	if got := streamRevisions(t, s, p+"c"); !reflect.DeepEqual(got, []uint64{0}) {
		t.Errorf("c after a fresh append: %v", got)
	}
}

// TestGroupWithAStoredEventFallsBackToAppendsAlone: an event id stored
// already fails the whole call; each append is then made alone, so a retry
// of a stored append is recognised as such and the others are stored.
func TestGroupWithAStoredEventFallsBackToAppendsAlone(t *testing.T) {
	s, _ := newStore(t)
	p := uuid.NewString()[:8] + "-"
	first := []eventstore.StreamAppend{one(p+"r", eventstore.NoStream, evs(2))}
	stored := mustAppend(t, s, first...)

	other := []eventstore.StreamAppend{one(p+"o", eventstore.NoStream, evs(1))}
	// The retry with Any passes the revision check and reaches the event
	// ids' unique index; with its original expectation it is refused
	// first. Both must come back as the stored append.
	retryAny := []eventstore.StreamAppend{one(p+"r", eventstore.Any, first[0].Events)}
	out := postgres.AppendTogether(s, other, retryAny)
	if out[0].Err != nil {
		t.Fatalf("the other append: %v", out[0].Err)
	}
	if out[1].Err != nil || out[1].Result.Position != stored.Position {
		t.Fatalf("retry: %v at %v; want the stored append at %v", out[1].Err, out[1].Result.Position, stored.Position)
	}
	out = postgres.AppendTogether(s, []eventstore.StreamAppend{one(p+"o2", eventstore.NoStream, evs(1))}, first)
	if out[0].Err != nil || out[1].Err != nil || out[1].Result.Position != stored.Position {
		t.Fatalf("retry with its own expectation: %v / %v at %v; want success at %v", out[0].Err, out[1].Err, out[1].Result.Position, stored.Position)
	}
	for stream, want := range map[string][]uint64{p + "r": {0, 1}, p + "o": {0}, p + "o2": {0}} {
		if got := streamRevisions(t, s, stream); !reflect.DeepEqual(got, want) {
			t.Errorf("stream %s holds %v; want %v", stream, got, want)
		}
	}
}

// TestGroupWhoseAnswerIsLostReportsWhatItStored: a group call that
// committed but whose answer never came back (a connection lost after the
// commit) stores nothing twice: each append, made again alone, is found
// stored and reports where it landed; a refused one is still refused.
func TestGroupWhoseAnswerIsLostReportsWhatItStored(t *testing.T) {
	// Every group call that committed loses its answer (a connection
	// dropped after the commit).
	s := postgres.New(pgtest.NewPool(t), postgres.AfterGroupCall(func() error { return errors.New("the answer was lost") }))
	t.Cleanup(s.Close)
	p := uuid.NewString()[:8] + "-"
	mustAppend(t, s, one(p+"x", eventstore.NoStream, evs(1))) // alone: no group call
	before := s.AppendStats()
	out := postgres.AppendTogether(s,
		[]eventstore.StreamAppend{one(p+"a", eventstore.NoStream, evs(2))},
		[]eventstore.StreamAppend{one(p+"x", eventstore.Exact(0), evs(1))},
		[]eventstore.StreamAppend{one(p+"y", eventstore.Exact(5), evs(1))})
	for i, stream := range []string{p + "a", p + "x"} {
		stored, err := s.ReadStream(context.Background(), stream, 0, 1000)
		if err != nil || len(stored) == 0 {
			t.Fatalf("read %s: %d events, %v", stream, len(stored), err)
		}
		if out[i].Err != nil || out[i].Result.Position != stored[len(stored)-1].Position || out[i].Result.Revisions[stream] != uint64(len(stored)-1) {
			t.Errorf("append to %s: %v at %v revisions %v; want its stored events, the last at %v revision %d",
				stream, out[i].Err, out[i].Result.Position, out[i].Result.Revisions, stored[len(stored)-1].Position, len(stored)-1)
		}
	}
	if out[0].Result.Position.Commit != out[1].Result.Position.Commit {
		t.Errorf("positions %v and %v: the appends were stored by separate transactions, not by the group call", out[0].Result.Position, out[1].Result.Position)
	}
	if !errors.Is(out[2].Err, eventstore.ErrConcurrency) {
		t.Errorf("the refused append: %v; want a concurrency error", out[2].Err)
	}
	for stream, want := range map[string][]uint64{p + "a": {0, 1}, p + "x": {0, 1}, p + "y": {}} {
		if got := streamRevisions(t, s, stream); !reflect.DeepEqual(got, want) {
			t.Errorf("stream %s holds %v; want %v", stream, got, want)
		}
	}
	// The call itself committed: its appends went again alone.
	if after := s.AppendStats(); after.Alone-before.Alone != 3 || after.Calls != before.Calls {
		t.Errorf("stats %+v -> %+v; want 3 appends made alone and no call counted", before, after)
	}
}

// TestQueueGroupsOnlyIndependentAppends: the queue puts appends in one call
// only if no stream one of them writes or locks is touched by another;
// streams read without a lock may be shared. The rest keep their order.
func TestQueueGroupsOnlyIndependentAppends(t *testing.T) {
	w := func(s string) eventstore.StreamAppend { return one(s, eventstore.Any, evs(1)) }
	lock := func(s string) eventstore.StreamAppend {
		return eventstore.StreamAppend{Stream: s, Expected: eventstore.Exact(0)}
	}
	obs := func(s string) eventstore.StreamAppend {
		return eventstore.StreamAppend{Stream: s, Expected: eventstore.Exact(0), Observed: true}
	}
	noStreamCheck := func(s string) eventstore.StreamAppend {
		return eventstore.StreamAppend{Stream: s, Expected: eventstore.NoStream}
	}
	for _, c := range []struct {
		name   string
		queued [][]eventstore.StreamAppend
		want   []int
	}{
		{"disjoint", [][]eventstore.StreamAppend{{w("a")}, {w("b")}, {w("c"), w("d")}}, []int{0, 1, 2}},
		{"same stream written", [][]eventstore.StreamAppend{{w("a")}, {w("a")}, {w("b")}}, []int{0, 2}},
		{"observed shared", [][]eventstore.StreamAppend{{w("a"), obs("m")}, {w("b"), obs("m")}}, []int{0, 1}},
		{"unlocked check shared", [][]eventstore.StreamAppend{{w("a"), noStreamCheck("m")}, {obs("m")}}, []int{0, 1}},
		{"written then observed", [][]eventstore.StreamAppend{{w("m")}, {w("b"), obs("m")}}, []int{0}},
		{"observed then written", [][]eventstore.StreamAppend{{w("b"), obs("m")}, {w("m")}, {w("c")}}, []int{0, 2}},
		{"guard locks", [][]eventstore.StreamAppend{{lock("g")}, {obs("g")}, {lock("g")}, {w("x")}}, []int{0, 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := postgres.Take(c.queued...); !reflect.DeepEqual(got, c.want) {
				t.Errorf("taken %v; want %v", got, c.want)
			}
		})
	}
	// A call carries at most 64 appends.
	var many [][]eventstore.StreamAppend
	for i := range 70 {
		many = append(many, []eventstore.StreamAppend{w(fmt.Sprint("s", i))})
	}
	if got := postgres.Take(many...); len(got) != 64 {
		t.Errorf("one call took %d appends; want 64", len(got))
	}
}

// TestGroupedAppendsUnderRace: writers contend in fours for a few streams
// (each reads its stream's revision and appends at it) and each also
// appends to a stream of its own and observes a shared one, with one call
// at a time so that groups form. Every success lands at the revision it
// expected, no revision is written twice or skipped, and every refusal
// names the contended stream.
func TestGroupedAppendsUnderRace(t *testing.T) {
	s, _ := newStore(t)
	s.AppendCalls = 1
	ctx := context.Background()
	p := uuid.NewString()[:8] + "-"
	shared := p + "shared"
	mustAppend(t, s, one(shared, eventstore.NoStream, evs(1)))
	const writers, hots, rounds = 24, 6, 15
	var (
		mu      sync.Mutex
		landed  = map[string]int{}
		wg      sync.WaitGroup
		failure = make(chan error, writers)
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hot := fmt.Sprintf("%shot-%d", p, w%hots)
			own := fmt.Sprintf("%sown-%d", p, w)
			ownRev := eventstore.NoStream
			for range rounds {
				for {
					cur, err := s.ReadStream(ctx, hot, 0, 10_000)
					if err != nil {
						failure <- err
						return
					}
					exp := eventstore.NoStream
					if len(cur) > 0 {
						exp = eventstore.Exact(cur[len(cur)-1].Revision)
					}
					res, err := s.Append(ctx, one(hot, exp, evs(1)), one(own, ownRev, evs(1)),
						eventstore.StreamAppend{Stream: shared, Expected: eventstore.Exact(0), Observed: true})
					var ce *eventstore.ConcurrencyError
					if errors.As(err, &ce) && ce.Stream == hot {
						continue
					}
					if err != nil {
						failure <- err
						return
					}
					mu.Lock()
					landed[fmt.Sprint(hot, "@", res.Revisions[hot])]++
					mu.Unlock()
					ownRev = eventstore.Exact(res.Revisions[own])
					break
				}
			}
		}()
	}
	wg.Wait()
	close(failure)
	for err := range failure {
		t.Fatal(err)
	}
	for h := range hots {
		hot := fmt.Sprintf("%shot-%d", p, h)
		revs := streamRevisions(t, s, hot)
		if want := writers / hots * rounds; len(revs) != want {
			t.Fatalf("%s holds %d events; want %d", hot, len(revs), want)
		}
		for i, r := range revs {
			if n := landed[fmt.Sprint(hot, "@", r)]; r != uint64(i) || n != 1 {
				t.Fatalf("%s revision %d: stored as %d, reported to %d appenders", hot, i, r, n)
			}
		}
	}
	for w := range writers {
		if got := streamRevisions(t, s, fmt.Sprintf("%sown-%d", p, w)); len(got) != rounds {
			t.Errorf("writer %d's own stream holds %d events; want %d", w, len(got), rounds)
		}
	}
	st := s.AppendStats()
	if st.Calls == 0 || st.Grouped < 2*st.Calls {
		t.Errorf("%d grouped calls carried %d appends: no groups formed", st.Calls, st.Grouped)
	}
	// Every append counted once: the writers' (their successes and their
	// refused tries) and the shared stream's first.
	if total := st.Alone + st.Grouped; total < writers*rounds+1 {
		t.Errorf("%d appends counted (%d alone, %d grouped); at least %d made", total, st.Alone, st.Grouped, writers*rounds+1)
	}
}

// TestQueuedAppendLeavesOnCancel: an append waiting in the queue whose
// caller gives up is taken out and never stored; one already in a call
// keeps its outcome.
func TestQueuedAppendLeavesOnCancel(t *testing.T) {
	s, pool := newStore(t)
	s.AppendCalls = 1
	ctx := context.Background()
	p := uuid.NewString()[:8] + "-"
	mustAppend(t, s, one(p+"held", eventstore.NoStream, evs(1)))

	// Hold the stream's row so the one call in flight waits.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM es_streams WHERE stream_id = $1 FOR UPDATE`, p+"held"); err != nil {
		t.Fatal(err)
	}
	inFlight := make(chan error, 1)
	go func() {
		_, err := s.Append(ctx, one(p+"held", eventstore.Exact(0), evs(1)))
		inFlight <- err
	}()
	waitFor(t, func() bool {
		var n int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%es_append%'`).Scan(&n)
		return n == 1
	})

	qctx, cancel := context.WithCancel(ctx)
	queued := make(chan error, 1)
	go func() {
		_, err := s.Append(qctx, one(p+"gave-up", eventstore.NoStream, evs(1)))
		queued <- err
	}()
	waitFor(t, func() bool { return postgres.Queued(s) == 1 }) // the only call is held
	cancel()
	if err := <-queued; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled queued append: %v; want context.Canceled", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-inFlight; err != nil {
		t.Fatalf("append in flight: %v", err)
	}
	mustAppend(t, s, one(p+"after", eventstore.NoStream, evs(1)))
	if got := streamRevisions(t, s, p+"gave-up"); len(got) != 0 {
		t.Errorf("the cancelled append was stored: %v", got)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
