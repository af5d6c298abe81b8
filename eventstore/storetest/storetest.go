// Package storetest is the conformance suite every eventstore.Store adapter
// runs. Each subtest uses its own stream-name prefix and only looks at its
// own streams in the global log, so the suite also works against a server
// shared with other clients (KurrentDB).
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/eventstore"
)

// Limits are what a store's server cannot do although the port asks it;
// the suite does not ask it of a store that declares the limit.
type Limits struct {
	// EventIDsPerStream: the store deduplicates an event id within its
	// stream only, as KurrentDB does; reusing one in another stream is not
	// refused with ErrDuplicateEvent.
	EventIDsPerStream bool
}

// Run runs the suite; newStore must return a store whose streams do not
// collide with other subtests (a fresh database, or a shared server).
func Run(t *testing.T, newStore func(t *testing.T) eventstore.Store) {
	RunWithLimits(t, newStore, Limits{})
}

// RunWithLimits is Run for a store with limits.
func RunWithLimits(t *testing.T, newStore func(t *testing.T) eventstore.Store, limits Limits) {
	t.Run("AppendAndReadStream", func(t *testing.T) { testAppendAndReadStream(t, newStore(t)) })
	t.Run("ExpectedRevisions", func(t *testing.T) { testExpectedRevisions(t, newStore(t)) })
	t.Run("AtomicAcrossStreams", func(t *testing.T) { testAtomicAcrossStreams(t, newStore(t)) })
	t.Run("ZeroEventRevisionCheck", func(t *testing.T) { testZeroEventRevisionCheck(t, newStore(t)) })
	t.Run("ObservedRevisionCheck", func(t *testing.T) { testObservedRevisionCheck(t, newStore(t)) })
	t.Run("ConcurrentAppendsOneStream", func(t *testing.T) { testConcurrentAppendsOneStream(t, newStore(t)) })
	t.Run("ConcurrentAppendsSharedStreams", func(t *testing.T) { testConcurrentAppendsSharedStreams(t, newStore(t)) })
	t.Run("FailedAppendMovesNoStream", func(t *testing.T) { testFailedAppendMovesNoStream(t, newStore(t)) })
	t.Run("IdempotentEventIDs", func(t *testing.T) { testIdempotentEventIDs(t, newStore(t), limits) })
	t.Run("ConcurrentIdenticalRetries", func(t *testing.T) { testConcurrentIdenticalRetries(t, newStore(t)) })
	t.Run("GlobalOrder", func(t *testing.T) { testGlobalOrder(t, newStore(t)) })
	t.Run("LargeBatch", func(t *testing.T) { testLargeBatch(t, newStore(t)) })
	t.Run("SubscribeCatchUpThenLive", func(t *testing.T) { testSubscribeCatchUpThenLive(t, newStore(t)) })
	t.Run("SubscribeResumeFromCheckpoint", func(t *testing.T) { testSubscribeResume(t, newStore(t)) })
	t.Run("SubscribeStops", func(t *testing.T) { testSubscribeStops(t, newStore(t)) })
	t.Run("GapSafety", func(t *testing.T) { testGapSafety(t, newStore(t)) })
	t.Run("LastCoversAcknowledgedAppends", func(t *testing.T) { testLastCoversAcknowledgedAppends(t, newStore(t)) })
	t.Run("TenantRead", func(t *testing.T) { testTenantRead(t, newStore(t)) })
}

// ---- helpers ----------------------------------------------------------------

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// prefix is unique per subtest so that a shared server's other streams
// (and earlier runs) never match.
func prefix() string { return "st" + strings.ReplaceAll(uuid.NewString()[:13], "-", "") }

func event(typ string, n int) eventstore.EventData {
	return eventstore.EventData{
		ID:   uuid.New(),
		Type: typ,
		Data: fmt.Appendf(nil, `{"n":%d,"note":"storetest"}`, n),
	}
}

func events(typ string, count int) []eventstore.EventData {
	out := make([]eventstore.EventData, count)
	for i := range out {
		out[i] = event(typ, i)
	}
	return out
}

func ids(evs []eventstore.EventData) []uuid.UUID {
	out := make([]uuid.UUID, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

func recIDs(evs []eventstore.RecordedEvent) []uuid.UUID {
	out := make([]uuid.UUID, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

func jsonEqual(t *testing.T, got, want []byte) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Errorf("stored JSON %q does not parse: %v", got, err)
		return false
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("test JSON %q does not parse: %v", want, err)
	}
	return reflect.DeepEqual(g, w)
}

func mustAppend(t *testing.T, s eventstore.Store, appends ...eventstore.StreamAppend) eventstore.AppendResult {
	t.Helper()
	res, err := s.Append(ctxT(t, 30*time.Second), appends...)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return res
}

func mustReadStream(t *testing.T, s eventstore.Store, stream string, from uint64, limit int) []eventstore.RecordedEvent {
	t.Helper()
	evs, err := s.ReadStream(ctxT(t, 30*time.Second), stream, from, limit)
	if err != nil {
		t.Fatalf("read stream %q: %v", stream, err)
	}
	return evs
}

func mustHead(t *testing.T, s eventstore.Store) eventstore.Position {
	t.Helper()
	h, err := s.Head(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatalf("head: %v", err)
	}
	return h
}

// readAllFrom pages ReadAll from after to the current end with the given
// page size; it returns this subtest's events (stream prefix p) and the
// position of the last event of any stream it read.
func readAllFrom(t *testing.T, s eventstore.Store, after eventstore.Position, page int, p string) (ours []eventstore.RecordedEvent, last eventstore.Position) {
	t.Helper()
	ctx := ctxT(t, 60*time.Second)
	last = after
	for {
		evs, err := s.ReadAll(ctx, after, page)
		if err != nil {
			t.Fatalf("read all after %v: %v", after, err)
		}
		if len(evs) > page {
			t.Fatalf("ReadAll returned %d events for limit %d", len(evs), page)
		}
		if len(evs) == 0 {
			return ours, last
		}
		for _, e := range evs {
			if !after.Less(e.Position) {
				t.Fatalf("ReadAll after %v returned event at %v: not strictly increasing", after, e.Position)
			}
			after = e.Position
			if strings.HasPrefix(e.Stream, p) {
				ours = append(ours, e)
			}
		}
		last = after
	}
}

// WaitReadable waits until ReadAll can return the event at pos and returns
// the head that reached it: a store may hold back committed events while
// earlier positions can still commit (PostgreSQL's horizon is cluster-wide,
// so any open transaction on the server delays it). It gives up after a
// minute.
func WaitReadable(tb testing.TB, s eventstore.Store, pos eventstore.Position) eventstore.Position {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		h, err := s.Head(context.Background())
		if err != nil {
			tb.Fatalf("head: %v", err)
		}
		if h.AtLeast(pos) {
			return h
		}
		if time.Now().After(deadline) {
			tb.Fatalf("head %v did not reach %v within a minute", h, pos)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func wantConcurrency(t *testing.T, err error, stream string, expected eventstore.ExpectedRevision, actual int64) {
	t.Helper()
	if err == nil {
		t.Fatalf("append to %q expecting %s succeeded; want a concurrency error", stream, expected)
	}
	if !errors.Is(err, eventstore.ErrConcurrency) {
		t.Fatalf("append to %q expecting %s: got %v; want errors.Is ErrConcurrency", stream, expected, err)
	}
	var ce *eventstore.ConcurrencyError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v is not a *ConcurrencyError", err)
	}
	if ce.Stream != stream {
		t.Errorf("ConcurrencyError.Stream = %q; want %q", ce.Stream, stream)
	}
	if ce.Expected != expected {
		t.Errorf("ConcurrencyError.Expected = %s; want %s", ce.Expected, expected)
	}
	if ce.Actual != actual {
		t.Errorf("ConcurrencyError.Actual = %d; want %d", ce.Actual, actual)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// collector gathers what a Subscribe handler receives, checking as it goes
// that positions strictly increase across every batch.
type collector struct {
	prefix string
	mu     sync.Mutex
	last   eventstore.Position
	ours   []eventstore.RecordedEvent
	errs   []string
}

func newCollector(p string, after eventstore.Position) *collector {
	return &collector{prefix: p, last: after}
}

func (c *collector) handle(_ context.Context, evs []eventstore.RecordedEvent) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(evs) == 0 {
		c.errs = append(c.errs, "handler called with an empty batch")
	}
	for _, e := range evs {
		if !c.last.Less(e.Position) {
			c.errs = append(c.errs, fmt.Sprintf("event %s at %v does not follow %v", e.ID, e.Position, c.last))
		}
		c.last = e.Position
		if strings.HasPrefix(e.Stream, c.prefix) {
			c.ours = append(c.ours, e)
		}
	}
	return nil
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ours)
}

func (c *collector) snapshot(t *testing.T) []eventstore.RecordedEvent {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.errs {
		t.Error(e)
	}
	return append([]eventstore.RecordedEvent(nil), c.ours...)
}

// subscribe runs Subscribe in the background; stop cancels it and returns
// its error.
func subscribe(t *testing.T, s eventstore.Store, after eventstore.Position, h func(context.Context, []eventstore.RecordedEvent) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Subscribe(ctx, after, h) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				err = errors.New("Subscribe did not return within 10s of cancel")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func sameIDs(t *testing.T, what string, got, want []uuid.UUID) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d events, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: event %d is %s, want %s", what, i, got[i], want[i])
		}
	}
}

// ---- subtests ---------------------------------------------------------------

func testAppendAndReadStream(t *testing.T, s eventstore.Store) {
	p := prefix()
	stream := p + "-acct"
	first := events("Opened", 3)
	first[1].Metadata = []byte(`{"causation":"c-1","actor":"tester"}`)
	res := mustAppend(t, s, eventstore.StreamAppend{Stream: stream, Expected: eventstore.NoStream, Events: first})
	if got := res.Revisions[stream]; got != 2 {
		t.Fatalf("revision after 3 events = %d; want 2", got)
	}
	second := events("Credited", 2)
	res = mustAppend(t, s, eventstore.StreamAppend{Stream: stream, Expected: eventstore.Exact(2), Events: second})
	if got := res.Revisions[stream]; got != 4 {
		t.Fatalf("revision after 5 events = %d; want 4", got)
	}
	all := append(append([]eventstore.EventData(nil), first...), second...)

	got := mustReadStream(t, s, stream, 0, 0)
	sameIDs(t, "ReadStream from 0", recIDs(got), ids(all))
	var prev eventstore.Position
	for i, e := range got {
		if e.Revision != uint64(i) {
			t.Errorf("event %d has revision %d", i, e.Revision)
		}
		if e.Stream != stream {
			t.Errorf("event %d stream = %q; want %q", i, e.Stream, stream)
		}
		if e.Type != all[i].Type {
			t.Errorf("event %d type = %q; want %q", i, e.Type, all[i].Type)
		}
		if !jsonEqual(t, e.Data, all[i].Data) {
			t.Errorf("event %d data = %s; want %s", i, e.Data, all[i].Data)
		}
		if all[i].Metadata != nil {
			if !jsonEqual(t, e.Metadata, all[i].Metadata) {
				t.Errorf("event %d metadata = %s; want %s", i, e.Metadata, all[i].Metadata)
			}
		} else if len(e.Metadata) != 0 {
			t.Errorf("event %d metadata = %s; want none", i, e.Metadata)
		}
		if e.RecordedAt.IsZero() {
			t.Errorf("event %d has no RecordedAt", i)
		}
		if i > 0 && !prev.Less(e.Position) {
			t.Errorf("event %d position %v does not follow %v", i, e.Position, prev)
		}
		prev = e.Position
	}

	sameIDs(t, "ReadStream from 2", recIDs(mustReadStream(t, s, stream, 2, 0)), ids(all[2:]))
	sameIDs(t, "ReadStream from 1 limit 2", recIDs(mustReadStream(t, s, stream, 1, 2)), ids(all[1:3]))
	sameIDs(t, "ReadStream from 4 limit 10", recIDs(mustReadStream(t, s, stream, 4, 10)), ids(all[4:]))
	if evs := mustReadStream(t, s, stream, 5, 0); len(evs) != 0 {
		t.Errorf("ReadStream past the end returned %d events", len(evs))
	}
	if evs := mustReadStream(t, s, p+"-missing", 0, 0); len(evs) != 0 {
		t.Errorf("missing stream returned %d events", len(evs))
	}
}

func testExpectedRevisions(t *testing.T, s eventstore.Store) {
	p := prefix()
	ctx := ctxT(t, 30*time.Second)
	a := p + "-a"
	mustAppend(t, s, eventstore.StreamAppend{Stream: a, Expected: eventstore.NoStream, Events: events("E", 1)})

	_, err := s.Append(ctx, eventstore.StreamAppend{Stream: a, Expected: eventstore.NoStream, Events: events("E", 1)})
	wantConcurrency(t, err, a, eventstore.NoStream, 0)

	_, err = s.Append(ctx, eventstore.StreamAppend{Stream: a, Expected: eventstore.Exact(5), Events: events("E", 1)})
	wantConcurrency(t, err, a, eventstore.Exact(5), 0)

	res := mustAppend(t, s, eventstore.StreamAppend{Stream: a, Expected: eventstore.Exact(0), Events: events("E", 2)})
	if res.Revisions[a] != 2 {
		t.Errorf("revision after Exact(0)+2 = %d; want 2", res.Revisions[a])
	}
	_, err = s.Append(ctx, eventstore.StreamAppend{Stream: a, Expected: eventstore.Exact(0), Events: events("E", 1)})
	wantConcurrency(t, err, a, eventstore.Exact(0), 2)

	res = mustAppend(t, s, eventstore.StreamAppend{Stream: a, Expected: eventstore.Any, Events: events("E", 1)})
	if res.Revisions[a] != 3 {
		t.Errorf("revision after Any = %d; want 3", res.Revisions[a])
	}

	b := p + "-b"
	_, err = s.Append(ctx, eventstore.StreamAppend{Stream: b, Expected: eventstore.Exact(0), Events: events("E", 1)})
	wantConcurrency(t, err, b, eventstore.Exact(0), -1)
	res = mustAppend(t, s, eventstore.StreamAppend{Stream: b, Expected: eventstore.Any, Events: events("E", 2)})
	if res.Revisions[b] != 1 {
		t.Errorf("revision of new stream after Any+2 = %d; want 1", res.Revisions[b])
	}

	if n := len(mustReadStream(t, s, a, 0, 0)); n != 4 {
		t.Errorf("stream a has %d events; want 4 (failed appends must write nothing)", n)
	}
	if n := len(mustReadStream(t, s, b, 0, 0)); n != 2 {
		t.Errorf("stream b has %d events; want 2", n)
	}
}

func testAtomicAcrossStreams(t *testing.T, s eventstore.Store) {
	p := prefix()
	ctx := ctxT(t, 30*time.Second)
	a, b := p+"-a", p+"-b"
	setup := mustAppend(t, s, eventstore.StreamAppend{Stream: b, Expected: eventstore.NoStream, Events: events("E", 1)})
	WaitReadable(t, s, setup.Position)
	before := mustHead(t, s)

	// The failing stream sorts both after and before the good one, so an
	// adapter that writes stream by stream is caught either way.
	for _, order := range [][2]string{{a, b}, {b, a}} {
		appends := map[string]eventstore.StreamAppend{
			a: {Stream: a, Expected: eventstore.NoStream, Events: events("A", 2)},
			b: {Stream: b, Expected: eventstore.Exact(3), Events: events("B", 1)},
		}
		_, err := s.Append(ctx, appends[order[0]], appends[order[1]])
		wantConcurrency(t, err, b, eventstore.Exact(3), 0)
	}
	if n := len(mustReadStream(t, s, a, 0, 0)); n != 0 {
		t.Errorf("stream a has %d events after a failed atomic append; want 0", n)
	}
	if n := len(mustReadStream(t, s, b, 0, 0)); n != 1 {
		t.Errorf("stream b has %d events after a failed atomic append; want 1", n)
	}
	if ours, _ := readAllFrom(t, s, before, 100, p); len(ours) != 0 {
		t.Errorf("global log gained %d events from a failed atomic append", len(ours))
	}
	if h := mustHead(t, s); h.Less(before) {
		t.Errorf("head moved back from %v to %v", before, h)
	}

	// And the same pair with right expectations lands in full.
	res := mustAppend(t, s,
		eventstore.StreamAppend{Stream: a, Expected: eventstore.NoStream, Events: events("A", 2)},
		eventstore.StreamAppend{Stream: b, Expected: eventstore.Exact(0), Events: events("B", 1)})
	if res.Revisions[a] != 1 || res.Revisions[b] != 1 {
		t.Errorf("revisions = %v; want a:1 b:1", res.Revisions)
	}
	WaitReadable(t, s, res.Position)
	if ours, _ := readAllFrom(t, s, before, 100, p); len(ours) != 3 {
		t.Errorf("global log has %d new events; want 3", len(ours))
	}
}

func testZeroEventRevisionCheck(t *testing.T, s eventstore.Store) {
	p := prefix()
	ctx := ctxT(t, 30*time.Second)
	a := p + "-a"
	setup := mustAppend(t, s, eventstore.StreamAppend{Stream: a, Expected: eventstore.NoStream, Events: events("E", 2)})
	WaitReadable(t, s, setup.Position)
	before := mustHead(t, s)

	res, err := s.Append(ctx, eventstore.StreamAppend{Stream: a, Expected: eventstore.Exact(1)})
	if err != nil {
		t.Fatalf("zero-event append with the right revision: %v", err)
	}
	if rev, ok := res.Revisions[a]; ok && rev != 1 {
		t.Errorf("zero-event append reports revision %d; want 1", rev)
	}
	// Nothing was written, so the result must not name a position readers
	// have not reached (a caller waiting for it would wait forever).
	if h := mustHead(t, s); h.Less(res.Position) {
		t.Errorf("zero-event append returned position %v beyond head %v", res.Position, h)
	}

	_, err = s.Append(ctx, eventstore.StreamAppend{Stream: a, Expected: eventstore.Exact(0)})
	wantConcurrency(t, err, a, eventstore.Exact(0), 1)
	_, err = s.Append(ctx, eventstore.StreamAppend{Stream: p + "-missing", Expected: eventstore.Exact(0)})
	wantConcurrency(t, err, p+"-missing", eventstore.Exact(0), -1)
	if _, err := s.Append(ctx, eventstore.StreamAppend{Stream: p + "-missing", Expected: eventstore.NoStream}); err != nil {
		t.Errorf("zero-event NoStream check on a missing stream: %v", err)
	}

	if n := len(mustReadStream(t, s, a, 0, 0)); n != 2 {
		t.Errorf("stream has %d events after zero-event appends; want 2", n)
	}
	if ours, _ := readAllFrom(t, s, before, 100, p); len(ours) != 0 {
		t.Errorf("zero-event appends put %d events in the global log", len(ours))
	}
}

// testObservedRevisionCheck: an Observed check (no events) beside a write,
// in any append, passes when the stream is at the expected revision (or
// absent, for NoStream) and otherwise fails the whole append with a
// ConcurrencyError naming it, writing nothing; it writes nothing itself.
func testObservedRevisionCheck(t *testing.T, s eventstore.Store) {
	p := prefix()
	ctx := ctxT(t, 30*time.Second)
	fees, escrow, missing := p+"-fees", p+"-escrow", p+"-missing"
	mustAppend(t, s, eventstore.StreamAppend{Stream: fees, Expected: eventstore.NoStream, Events: events("F", 2)})
	observe := func(stream string, e eventstore.ExpectedRevision) eventstore.StreamAppend {
		return eventstore.StreamAppend{Stream: stream, Expected: e, Observed: true}
	}
	write := func() eventstore.StreamAppend {
		return eventstore.StreamAppend{Stream: escrow, Expected: eventstore.Any, Events: events("E", 1)}
	}

	res, err := s.Append(ctx, write(), observe(fees, eventstore.Exact(1)), observe(missing, eventstore.NoStream))
	if err != nil {
		t.Fatalf("observed checks at the right revisions: %v", err)
	}
	if res.Revisions[escrow] != 0 || res.Revisions[fees] != 1 {
		t.Errorf("revisions %v; want %s:0 %s:1", res.Revisions, escrow, fees)
	}
	if rev, ok := res.Revisions[missing]; ok {
		t.Errorf("an observed absent stream reports revision %d", rev)
	}

	for _, f := range []struct {
		name   string
		check  eventstore.StreamAppend
		actual int64
	}{
		{"behind", observe(fees, eventstore.Exact(0)), 1},
		{"ahead", observe(fees, eventstore.Exact(5)), 1},
		{"absent expected, stream exists", observe(fees, eventstore.NoStream), 1},
		{"exact, stream missing", observe(missing, eventstore.Exact(0)), -1},
	} {
		_, err := s.Append(ctx, write(), f.check)
		wantConcurrency(t, err, f.check.Stream, f.check.Expected, f.actual)
	}
	if n := len(mustReadStream(t, s, escrow, 0, 0)); n != 1 {
		t.Errorf("the written stream has %d events after failed observed checks; want 1", n)
	}
	if n := len(mustReadStream(t, s, fees, 0, 0)); n != 2 {
		t.Errorf("the observed stream has %d events; want 2 (a check writes nothing)", n)
	}
	// An observed check alone is a check too.
	if _, err := s.Append(ctx, observe(fees, eventstore.Exact(1))); err != nil {
		t.Errorf("an observed check alone: %v", err)
	}
	_, err = s.Append(ctx, observe(fees, eventstore.Exact(0)))
	wantConcurrency(t, err, fees, eventstore.Exact(0), 1)
}

// testFailedAppendMovesNoStream: whatever kind of expectation fails, no
// stream of the append moves, an Any stream with events included, and a
// zero-event NoStream check fails on a stream that exists.
func testFailedAppendMovesNoStream(t *testing.T, s eventstore.Store) {
	p := prefix()
	ctx := ctxT(t, 30*time.Second)
	a, b, c := p+"-a", p+"-b", p+"-c"
	mustAppend(t, s, eventstore.StreamAppend{Stream: b, Expected: eventstore.NoStream, Events: events("B", 2)})

	fails := []struct {
		name    string
		failing eventstore.StreamAppend
		actual  int64
	}{
		{"exact, wrong revision", eventstore.StreamAppend{Stream: b, Expected: eventstore.Exact(0), Events: events("B", 1)}, 1},
		{"exact, missing stream", eventstore.StreamAppend{Stream: c, Expected: eventstore.Exact(0), Events: events("C", 1)}, -1},
		{"new, stream exists", eventstore.StreamAppend{Stream: b, Expected: eventstore.NoStream, Events: events("B", 1)}, 1},
		{"zero-event absent check, stream exists", eventstore.StreamAppend{Stream: b, Expected: eventstore.NoStream}, 1},
		{"zero-event exact check, wrong revision", eventstore.StreamAppend{Stream: b, Expected: eventstore.Exact(7)}, 1},
	}
	for _, f := range fails {
		// a sorts before b and c, and an Any stream would move whatever
		// its revision: only the failure must stop it.
		_, err := s.Append(ctx, eventstore.StreamAppend{Stream: a, Expected: eventstore.Any, Events: events("A", 1)}, f.failing)
		if err == nil {
			t.Fatalf("%s: append succeeded", f.name)
		}
		wantConcurrency(t, err, f.failing.Stream, f.failing.Expected, f.actual)
	}
	if n := len(mustReadStream(t, s, a, 0, 0)); n != 0 {
		t.Errorf("the Any stream has %d events after failed appends; want 0", n)
	}
	if n := len(mustReadStream(t, s, b, 0, 0)); n != 2 {
		t.Errorf("stream b has %d events after failed appends; want 2", n)
	}
	if n := len(mustReadStream(t, s, c, 0, 0)); n != 0 {
		t.Errorf("stream c has %d events after failed appends; want 0", n)
	}
	res := mustAppend(t, s, eventstore.StreamAppend{Stream: a, Expected: eventstore.Any, Events: events("A", 1)},
		eventstore.StreamAppend{Stream: c, Expected: eventstore.NoStream})
	if res.Revisions[a] != 0 {
		t.Errorf("the Any stream is at revision %d after its first event; want 0 (failed appends moved it)", res.Revisions[a])
	}
	if rev, ok := res.Revisions[c]; ok {
		t.Errorf("a zero-event absent check reports revision %d for the missing stream", rev)
	}
}

// testConcurrentAppendsSharedStreams: writers append to the same three
// streams at once, each naming them in its own order and with Any, so they
// contend for every stream in every order. None may fail (a store that
// locks streams in the caller's order deadlocks here) and no event may be
// lost or share a revision.
func testConcurrentAppendsSharedStreams(t *testing.T, s eventstore.Store) {
	p := prefix()
	const writers, rounds = 8, 10
	streams := []string{p + "-a", p + "-b", p + "-c"}
	var wg sync.WaitGroup
	errs := make(chan error, writers*rounds)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := ctxT(t, 60*time.Second)
			for r := range rounds {
				order := rand.Perm(len(streams))
				appends := make([]eventstore.StreamAppend, len(order))
				for i, k := range order {
					appends[i] = eventstore.StreamAppend{Stream: streams[k], Expected: eventstore.Any, Events: events(fmt.Sprintf("W%dR%d", w, r), 1+k%2)}
				}
				if _, err := s.Append(ctx, appends...); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent append over shared streams: %v", err)
	}
	for k, st := range streams {
		evs := mustReadStream(t, s, st, 0, 0)
		if want := writers * rounds * (1 + k%2); len(evs) != want {
			t.Errorf("stream %s has %d events; want %d", st, len(evs), want)
		}
		for i, e := range evs {
			if e.Revision != uint64(i) {
				t.Fatalf("stream %s: event %d has revision %d", st, i, e.Revision)
			}
		}
	}
}

func testConcurrentAppendsOneStream(t *testing.T, s eventstore.Store) {
	p := prefix()
	const writers = 16
	race := func(stream string, expected eventstore.ExpectedRevision) {
		t.Helper()
		var (
			wins, conflicts atomic.Int32
			start           = make(chan struct{})
			wg              sync.WaitGroup
			mu              sync.Mutex
			other           []error
		)
		for range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := s.Append(context.Background(), eventstore.StreamAppend{Stream: stream, Expected: expected, Events: events("Race", 1)})
				switch {
				case err == nil:
					wins.Add(1)
				case errors.Is(err, eventstore.ErrConcurrency):
					var ce *eventstore.ConcurrencyError
					if !errors.As(err, &ce) || ce.Stream != stream {
						mu.Lock()
						other = append(other, fmt.Errorf("conflict does not name %q: %w", stream, err))
						mu.Unlock()
					}
					conflicts.Add(1)
				default:
					mu.Lock()
					other = append(other, err)
					mu.Unlock()
				}
			}()
		}
		close(start)
		wg.Wait()
		for _, err := range other {
			t.Errorf("%s: unexpected error: %v", expected, err)
		}
		if wins.Load() != 1 || conflicts.Load() != writers-1 {
			t.Errorf("%s: %d wins and %d conflicts; want 1 and %d", expected, wins.Load(), conflicts.Load(), writers-1)
		}
	}

	existing := p + "-existing"
	mustAppend(t, s, eventstore.StreamAppend{Stream: existing, Expected: eventstore.NoStream, Events: events("E", 1)})
	race(existing, eventstore.Exact(0))
	if n := len(mustReadStream(t, s, existing, 0, 0)); n != 2 {
		t.Errorf("stream has %d events after the Exact race; want 2", n)
	}

	fresh := p + "-fresh"
	race(fresh, eventstore.NoStream)
	if n := len(mustReadStream(t, s, fresh, 0, 0)); n != 1 {
		t.Errorf("stream has %d events after the NoStream race; want 1", n)
	}
}

func testIdempotentEventIDs(t *testing.T, s eventstore.Store, limits Limits) {
	p := prefix()
	ctx := ctxT(t, 30*time.Second)
	a, b, c := p+"-a", p+"-b", p+"-c"
	before := mustHead(t, s)
	evA, evB := events("A", 2), events("B", 1)
	batch := []eventstore.StreamAppend{
		{Stream: a, Expected: eventstore.NoStream, Events: evA},
		{Stream: b, Expected: eventstore.NoStream, Events: evB},
	}
	first := mustAppend(t, s, batch...)
	again, err := s.Append(ctx, batch...)
	if err != nil {
		t.Fatalf("repeating the same append (same ids, same streams): %v", err)
	}
	if again.Position != first.Position {
		t.Errorf("repeated append reports position %v; the original landed at %v", again.Position, first.Position)
	}
	last := mustAppend(t, s, eventstore.StreamAppend{Stream: c, Expected: eventstore.NoStream, Events: events("C", 1)})
	if _, err := s.Append(ctx, eventstore.StreamAppend{Stream: a, Expected: eventstore.NoStream, Events: evA}); err != nil {
		t.Errorf("repeating a single-stream append: %v", err)
	}

	sameIDs(t, "stream a", recIDs(mustReadStream(t, s, a, 0, 0)), ids(evA))
	sameIDs(t, "stream b", recIDs(mustReadStream(t, s, b, 0, 0)), ids(evB))
	WaitReadable(t, s, last.Position)
	if ours, _ := readAllFrom(t, s, before, 100, p); len(ours) != 4 {
		t.Errorf("global log has %d events; want 4 (repeats must not duplicate)", len(ours))
	}

	// Expected Any and Exact retries too: the repeat must not append again
	// (Any would otherwise accept it) nor fail on the revision it moved.
	e := p + "-e"
	evE := events("E", 2)
	anyAppend := eventstore.StreamAppend{Stream: e, Expected: eventstore.Any, Events: evE}
	firstE := mustAppend(t, s, anyAppend)
	if again, err := s.Append(ctx, anyAppend); err != nil || again.Position != firstE.Position {
		t.Errorf("repeating an append with expected Any: %v at %v; want success at %v", err, again.Position, firstE.Position)
	}
	evE2 := events("E2", 1)
	exact := eventstore.StreamAppend{Stream: e, Expected: eventstore.Exact(1), Events: evE2}
	mustAppend(t, s, exact)
	if _, err := s.Append(ctx, exact); err != nil {
		t.Errorf("repeating an append with an exact expected revision: %v", err)
	}
	sameIDs(t, "stream e", recIDs(mustReadStream(t, s, e, 0, 0)), append(ids(evE), ids(evE2)...))

	if limits.EventIDsPerStream {
		return
	}
	d := p + "-d"
	reused := evA[0]
	reused.Data = []byte(`{"other":true}`)
	_, err = s.Append(ctx, eventstore.StreamAppend{Stream: d, Expected: eventstore.Any, Events: []eventstore.EventData{event("D", 0), reused}})
	if !errors.Is(err, eventstore.ErrDuplicateEvent) {
		t.Errorf("reusing an event id in another stream: got %v; want ErrDuplicateEvent", err)
	}
	if n := len(mustReadStream(t, s, d, 0, 0)); n != 0 {
		t.Errorf("stream d has %d events after a rejected append; want 0", n)
	}
}

func testConcurrentIdenticalRetries(t *testing.T, s eventstore.Store) {
	// A client whose append timed out retries it while the first attempt
	// may still be in flight: every attempt must succeed, once stored.
	p := prefix()
	a, b := p+"-a", p+"-b"
	mustAppend(t, s, eventstore.StreamAppend{Stream: a, Expected: eventstore.NoStream, Events: events("E", 1)})
	batch := []eventstore.StreamAppend{
		{Stream: a, Expected: eventstore.Exact(0), Events: events("A", 2)},
		{Stream: b, Expected: eventstore.NoStream, Events: events("B", 1)},
	}
	const attempts = 8
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make([]error, attempts)
		res   = make([]eventstore.AppendResult, attempts)
	)
	for i := range attempts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res[i], errs[i] = s.Append(context.Background(), batch...)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("attempt %d: %v", i, err)
		} else if res[i].Position != res[0].Position {
			t.Errorf("attempt %d reports position %v; attempt 0 reports %v", i, res[i].Position, res[0].Position)
		}
	}
	if n := len(mustReadStream(t, s, a, 0, 0)); n != 3 {
		t.Errorf("stream a has %d events; want 3", n)
	}
	if n := len(mustReadStream(t, s, b, 0, 0)); n != 1 {
		t.Errorf("stream b has %d events; want 1", n)
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

func testSubscribeCatchUpThenLive(t *testing.T, s eventstore.Store) {
	p := prefix()
	var want []uuid.UUID
	for i := range 4 {
		evs := events("Pre", 1+i)
		appends := []eventstore.StreamAppend{{Stream: p + "-a", Expected: eventstore.Any, Events: evs[:1]}}
		if len(evs) > 1 { // a stream without events would be a check, not a write
			appends = append(appends, eventstore.StreamAppend{Stream: p + "-b", Expected: eventstore.Any, Events: evs[1:]})
		}
		mustAppend(t, s, appends...)
		want = append(want, ids(evs)...)
	}
	c := newCollector(p, eventstore.Start)
	stop := subscribe(t, s, eventstore.Start, c.handle)
	waitFor(t, 20*time.Second, "catch-up", func() bool { return c.count() >= len(want) })

	for i := range 5 {
		evs := events("Live", 1+i%3)
		mustAppend(t, s, eventstore.StreamAppend{Stream: p + "-a", Expected: eventstore.Any, Events: evs})
		want = append(want, ids(evs)...)
	}
	waitFor(t, 10*time.Second, "live events", func() bool { return c.count() >= len(want) })
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("Subscribe returned %v after cancel; want context.Canceled", err)
	}
	sameIDs(t, "subscription", recIDs(c.snapshot(t)), want)
}

func testSubscribeResume(t *testing.T, s eventstore.Store) {
	p := prefix()
	before := mustHead(t, s)
	for i := range 6 {
		res := mustAppend(t, s, eventstore.StreamAppend{Stream: fmt.Sprintf("%s-%d", p, i%2), Expected: eventstore.Any, Events: events("E", 2)})
		if i == 5 {
			WaitReadable(t, s, res.Position)
		}
	}
	ours, _ := readAllFrom(t, s, before, 100, p)
	if len(ours) != 12 {
		t.Fatalf("setup: %d events; want 12", len(ours))
	}
	// A consumer handled up to event 6 and stored its position.
	checkpoint := ours[6].Position
	want := recIDs(ours[7:])

	c := newCollector(p, checkpoint)
	stop := subscribe(t, s, checkpoint, c.handle)
	waitFor(t, 20*time.Second, "resumed catch-up", func() bool { return c.count() >= len(want) })
	more := events("After", 3)
	mustAppend(t, s, eventstore.StreamAppend{Stream: p + "-0", Expected: eventstore.Any, Events: more})
	want = append(want, ids(more)...)
	waitFor(t, 10*time.Second, "events after resuming", func() bool { return c.count() >= len(want) })
	time.Sleep(100 * time.Millisecond) // room for a stray duplicate to show up
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("Subscribe returned %v after cancel; want context.Canceled", err)
	}
	sameIDs(t, "resumed subscription", recIDs(c.snapshot(t)), want)
}

func testSubscribeStops(t *testing.T, s eventstore.Store) {
	p := prefix()
	head := mustHead(t, s)

	// Cancel while idle at the head.
	idle := subscribe(t, s, head, func(context.Context, []eventstore.RecordedEvent) error { return nil })
	time.Sleep(50 * time.Millisecond)
	began := time.Now()
	if err := idle(); !errors.Is(err, context.Canceled) {
		t.Errorf("idle Subscribe returned %v after cancel; want context.Canceled", err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("Subscribe took %v to return after cancel", d)
	}

	// The handler's error ends the subscription and is returned as is.
	mustAppend(t, s, eventstore.StreamAppend{Stream: p + "-a", Expected: eventstore.NoStream, Events: events("E", 3)})
	errStop := errors.New("projection failed")
	var calls atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- s.Subscribe(context.Background(), head, func(context.Context, []eventstore.RecordedEvent) error {
			calls.Add(1)
			return errStop
		})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, errStop) {
			t.Errorf("Subscribe returned %v; want the handler's error", err)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("handler called %d times after returning an error; want 1", n)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Subscribe did not return after the handler failed")
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
