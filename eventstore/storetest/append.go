// Conformance cases of Append: revisions, atomicity, concurrency, idempotent
// event ids.

package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/escrowd/escrowd/eventstore"
)

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
