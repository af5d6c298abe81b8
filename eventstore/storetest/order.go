// Conformance cases of the global log: order, large batches, no gaps, Last.

package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/eventstore"
)

// testOneAppendInStreamNameOrder: the events of one append over several
// streams, given out of name order, are read back from the global log
// stream by stream in name order, each stream's in the order given (a
// projector that folds several streams of one decision sees the same order
// on every store).
func testOneAppendInStreamNameOrder(t *testing.T, s eventstore.Store) {
	p := prefix()
	before := mustHead(t, s)
	named := []string{p + "-c", p + "-a", p + "-b"} // the order given
	var appends []eventstore.StreamAppend
	byStream := map[string][]uuid.UUID{}
	for _, st := range named {
		evs := events("Ordered", 2)
		appends = append(appends, eventstore.StreamAppend{Stream: st, Expected: eventstore.NoStream, Events: evs})
		byStream[st] = ids(evs)
	}
	res := mustAppend(t, s, appends...)
	WaitReadable(t, s, res.Position)
	ours, _ := readAllFrom(t, s, before, 100, p)
	var want []uuid.UUID
	for _, st := range []string{p + "-a", p + "-b", p + "-c"} {
		want = append(want, byStream[st]...)
	}
	sameIDs(t, "one append in the global log", recIDs(ours), want)
	if last := ours[len(ours)-1]; last.Position != res.Position {
		t.Fatalf("the append reported position %s, its last event in the log is at %s", res.Position, last.Position)
	}
}

func testGlobalOrder(t *testing.T, s eventstore.Store) {
	p := prefix()
	before := mustHead(t, s)
	streams := []string{p + "-x", p + "-y", p + "-z"}
	type appended struct {
		ids []uuid.UUID
		res eventstore.AppendResult
	}
	var done []appended
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 30 {
		var appends []eventstore.StreamAppend
		var all []uuid.UUID
		targets := streams[i%3 : i%3+1]
		if i%3 == 0 { // every third append touches several streams
			targets = streams[:2+(i/3)%2]
		}
		for _, st := range targets {
			evs := events(fmt.Sprintf("T%d", i), 1+rng.IntN(4))
			appends = append(appends, eventstore.StreamAppend{Stream: st, Expected: eventstore.Any, Events: evs})
			all = append(all, ids(evs)...)
		}
		done = append(done, appended{ids: all, res: mustAppend(t, s, appends...)})
	}

	WaitReadable(t, s, done[len(done)-1].res.Position)
	ours, last := readAllFrom(t, s, before, 7, p)
	byID := make(map[uuid.UUID]eventstore.RecordedEvent, len(ours))
	for _, e := range ours {
		if _, dup := byID[e.ID]; dup {
			t.Fatalf("ReadAll returned %s twice", e.ID)
		}
		byID[e.ID] = e
	}
	total := 0
	var prevMax eventstore.Position
	for i, a := range done {
		total += len(a.ids)
		var lo, hi eventstore.Position
		for k, id := range a.ids {
			e, ok := byID[id]
			if !ok {
				t.Fatalf("append %d: event %s missing from ReadAll", i, id)
			}
			if k == 0 || e.Position.Less(lo) {
				lo = e.Position
			}
			if k == 0 || hi.Less(e.Position) {
				hi = e.Position
			}
		}
		if hi != a.res.Position {
			t.Errorf("append %d: AppendResult.Position %v; its last event is at %v", i, a.res.Position, hi)
		}
		if i > 0 && !prevMax.Less(lo) {
			t.Errorf("append %d starts at %v, not after the previous append's end %v", i, lo, prevMax)
		}
		prevMax = hi
	}
	if len(ours) != total {
		t.Errorf("ReadAll returned %d of our events; appended %d", len(ours), total)
	}
	next := map[string]uint64{}
	for _, e := range ours {
		if e.Revision != next[e.Stream] {
			t.Errorf("stream %s: revision %d in global order, want %d", e.Stream, e.Revision, next[e.Stream])
		}
		next[e.Stream] = e.Revision + 1
	}
	for _, st := range streams {
		sr := mustReadStream(t, s, st, 0, 0)
		for i, e := range sr {
			if g := byID[e.ID]; g.Position != e.Position || g.Revision != e.Revision {
				t.Errorf("%s rev %d: ReadStream says %v/%d, ReadAll %v/%d", st, i, e.Position, e.Revision, g.Position, g.Revision)
			}
		}
	}
	if h := mustHead(t, s); h != last {
		t.Errorf("Head = %v; the last event ReadAll returns is at %v", h, last)
	}
	if last.Less(done[len(done)-1].res.Position) {
		t.Errorf("last readable position %v is before the last append %v", last, done[len(done)-1].res.Position)
	}

	// ReadAll is strictly after its argument.
	for _, k := range []int{0, 5, len(ours) - 2} {
		evs, err := s.ReadAll(ctxT(t, 10*time.Second), ours[k].Position, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 1 || !ours[k].Position.Less(evs[0].Position) || ours[k+1].Position.Less(evs[0].Position) {
			t.Errorf("ReadAll after event %d (%v) returned %v; want the next event %v", k, ours[k].Position, evs, ours[k+1].Position)
		}
	}
}

func testLargeBatch(t *testing.T, s eventstore.Store) {
	p := prefix()
	before := mustHead(t, s)
	sizes := map[string]int{p + "-one": 1700, p + "-two": 1700, p + "-three": 1600}
	var appends []eventstore.StreamAppend
	want := map[uuid.UUID]string{}
	for st, n := range sizes {
		evs := events("Bulk", n)
		for _, e := range evs {
			want[e.ID] = st
		}
		appends = append(appends, eventstore.StreamAppend{Stream: st, Expected: eventstore.NoStream, Events: evs})
	}
	res := mustAppend(t, s, appends...)
	for st, n := range sizes {
		if res.Revisions[st] != uint64(n-1) {
			t.Errorf("%s: revision %d; want %d", st, res.Revisions[st], n-1)
		}
	}

	WaitReadable(t, s, res.Position)
	ctx := ctxT(t, 60*time.Second)
	var ours []eventstore.RecordedEvent
	after, pages := before, 0
	for {
		evs, err := s.ReadAll(ctx, after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) > 1000 {
			t.Fatalf("page of %d events for limit 1000", len(evs))
		}
		if len(evs) == 0 {
			break
		}
		pages++
		for _, e := range evs {
			if !after.Less(e.Position) {
				t.Fatalf("position %v does not follow %v", e.Position, after)
			}
			after = e.Position
			if strings.HasPrefix(e.Stream, p) {
				ours = append(ours, e)
			}
		}
	}
	if len(ours) != 5000 {
		t.Fatalf("read back %d events; want 5000", len(ours))
	}
	if pages < 5 {
		t.Errorf("5000 events came back in %d pages of at most 1000", pages)
	}
	next := map[string]uint64{}
	for _, e := range ours {
		if want[e.ID] != e.Stream {
			t.Fatalf("event %s in stream %q; appended to %q", e.ID, e.Stream, want[e.ID])
		}
		delete(want, e.ID)
		if e.Revision != next[e.Stream] {
			t.Fatalf("%s: revision %d; want %d", e.Stream, e.Revision, next[e.Stream])
		}
		next[e.Stream]++
	}
	if ours[len(ours)-1].Position != res.Position {
		t.Errorf("AppendResult.Position %v; last event at %v", res.Position, ours[len(ours)-1].Position)
	}
	for st, n := range sizes {
		if got := len(mustReadStream(t, s, st, 0, 0)); got != n {
			t.Errorf("%s: ReadStream returned %d; want %d", st, got, n)
		}
	}
}

// testGapSafety is the proof that a follower advancing by the last position
// it saw never skips an event: many writers commit out of order while a
// subscriber and a ReadAll poller follow the log.
func testGapSafety(t *testing.T, s eventstore.Store) {
	p := prefix()
	const (
		writers   = 16
		perWriter = 300
	)
	start := mustHead(t, s)

	sub := newCollector(p, start)
	stopSub := subscribe(t, s, start, sub.handle)

	poll := newCollector(p, start)
	pollCtx, stopPoll := context.WithCancel(context.Background())
	pollDone := make(chan error, 1)
	go func() {
		after := start
		for pollCtx.Err() == nil {
			evs, err := s.ReadAll(pollCtx, after, 500)
			if err != nil {
				if pollCtx.Err() != nil {
					break
				}
				pollDone <- err
				return
			}
			if len(evs) == 0 {
				time.Sleep(time.Millisecond)
				continue
			}
			_ = poll.handle(pollCtx, evs)
			after = evs[len(evs)-1].Position
		}
		pollDone <- nil
	}()

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		written = make(map[uuid.UUID]bool)
		failed  []error
	)
	shared := p + "-shared"
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			own := []string{fmt.Sprintf("%s-w%02d-a", p, w), fmt.Sprintf("%s-w%02d-b", p, w), fmt.Sprintf("%s-w%02d-c", p, w)}
			revs := map[string]int64{} // -1 when absent: only this writer writes its streams
			for _, st := range own {
				revs[st] = -1
			}
			var mine []uuid.UUID
			for i := range perWriter {
				var appends []eventstore.StreamAppend
				nStreams := 1
				if r := rng.IntN(10); r >= 7 {
					nStreams = 2 + r%2
				}
				for _, k := range rng.Perm(len(own))[:nStreams] {
					st := own[k]
					size := 1 + rng.IntN(3)
					if rng.IntN(20) == 0 {
						size = 5 + rng.IntN(20)
					}
					exp := eventstore.NoStream
					if revs[st] >= 0 {
						exp = eventstore.Exact(uint64(revs[st]))
					}
					appends = append(appends, eventstore.StreamAppend{Stream: st, Expected: exp, Events: events(fmt.Sprintf("W%d", w), size)})
				}
				if rng.IntN(8) == 0 { // a contended stream every writer touches
					appends = append(appends, eventstore.StreamAppend{Stream: shared, Expected: eventstore.Any, Events: events("Shared", 1)})
				}
				res, err := s.Append(context.Background(), appends...)
				if err != nil {
					mu.Lock()
					failed = append(failed, fmt.Errorf("writer %d append %d: %w", w, i, err))
					mu.Unlock()
					return
				}
				for _, a := range appends {
					if a.Stream != shared {
						revs[a.Stream] = int64(res.Revisions[a.Stream])
					}
					mine = append(mine, ids(a.Events)...)
				}
			}
			mu.Lock()
			for _, id := range mine {
				written[id] = true
			}
			mu.Unlock()
		}()
	}
	began := time.Now()
	wg.Wait()
	writeTime := time.Since(began)
	for _, err := range failed {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	total := len(written)
	t.Logf("%d writers appended %d events in %v", writers, total, writeTime)

	// On a timeout, carry on: the comparison below says what went missing.
	for deadline := time.Now().Add(20 * time.Second); sub.count() < total || poll.count() < total; {
		if time.Now().After(deadline) {
			t.Errorf("followers saw %d (Subscribe) and %d (ReadAll loop) of %d events within 20s", sub.count(), poll.count(), total)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // room for a stray duplicate to show up
	if err := stopSub(); !errors.Is(err, context.Canceled) {
		t.Errorf("Subscribe returned %v; want context.Canceled", err)
	}
	stopPoll()
	if err := <-pollDone; err != nil {
		t.Errorf("ReadAll poller: %v", err)
	}

	for name, c := range map[string]*collector{"Subscribe": sub, "ReadAll loop": poll} {
		seen := make(map[uuid.UUID]int, total)
		evs := c.snapshot(t)
		for _, e := range evs {
			seen[e.ID]++
		}
		missing, dups, unknown := 0, 0, 0
		for id := range written {
			if seen[id] == 0 {
				missing++
			}
		}
		for id, n := range seen {
			if n > 1 {
				dups++
			}
			if !written[id] {
				unknown++
			}
		}
		if missing+dups+unknown > 0 || len(evs) != total {
			t.Errorf("%s saw %d events for %d written: %d missing, %d duplicated, %d never written", name, len(evs), total, missing, dups, unknown)
		}
	}
}

// testLastCoversAcknowledgedAppends: Last is never before an append
// acknowledged before the call, whichever writer made it, nor before Head;
// once ReadAll can return everything, Head and Last agree. Without an open
// transaction holding a horizon, Head would pass this too: the case that
// tells them apart is store-specific, and the PostgreSQL adapter's horizon
// test holds one open (TestHorizonReportsEventsHeldByAnotherDatabase).
func testLastCoversAcknowledgedAppends(t *testing.T, s eventstore.Store) {
	p := prefix()
	ctx := ctxT(t, 30*time.Second)
	const writers, each = 4, 5
	acked := make(chan eventstore.Position, writers*each)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				res, err := s.Append(ctx, eventstore.StreamAppend{Stream: fmt.Sprintf("%s-%d-%d", p, w, i),
					Expected: eventstore.NoStream, Events: events("E", 1+i%2)})
				if err != nil {
					t.Errorf("append: %v", err)
					return
				}
				acked <- res.Position
			}
		})
	}
	var seen []eventstore.Position
	check := func() {
		t.Helper()
		h := mustHead(t, s) // read first: appends still run
		last, err := s.Last(ctx)
		if err != nil {
			t.Fatalf("last: %v", err)
		}
		for _, pos := range seen {
			if last.Less(pos) {
				t.Fatalf("Last %v is before acknowledged append %v", last, pos)
			}
		}
		if last.Less(h) {
			t.Fatalf("Last %v is before the earlier Head %v", last, h)
		}
	}
	go func() { wg.Wait(); close(acked) }()
	for pos := range acked {
		seen = append(seen, pos)
		check()
	}
	for _, pos := range seen {
		WaitReadable(t, s, pos)
	}
	check()
}
