package kurrenttest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/kurrent-io/KurrentDB-Client-Go/kurrentdb"
)

// These tests pin the server to what KurrentDB documents, through the
// official client: what the client makes of the answers is what the
// adapter sees.

func start(t *testing.T, opts Options) *kurrentdb.Client {
	t.Helper()
	srv, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	cfg, err := kurrentdb.ParseConnectionString(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	c, err := kurrentdb.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func ev(typ string) kurrentdb.EventData {
	return kurrentdb.EventData{EventID: uuid.New(), EventType: typ, ContentType: kurrentdb.ContentTypeJson, Data: []byte(`{"n":1}`)}
}

func readAll(t *testing.T, c *kurrentdb.Client, o kurrentdb.ReadAllOptions, n uint64) []*kurrentdb.RecordedEvent {
	t.Helper()
	rs, err := c.ReadAll(ctx(t), o, n)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []*kurrentdb.RecordedEvent
	for {
		e, err := rs.Recv()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e.Event)
	}
}

func readStream(c *kurrentdb.Client, t *testing.T, stream string, o kurrentdb.ReadStreamOptions, n uint64) ([]*kurrentdb.RecordedEvent, error) {
	rs, err := c.ReadStream(ctx(t), stream, o, n)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []*kurrentdb.RecordedEvent
	for {
		e, err := rs.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, e.Event)
	}
}

func code(err error) kurrentdb.ErrorCode {
	var kerr *kurrentdb.Error
	if errors.As(err, &kerr) {
		return kerr.Code()
	}
	return -1
}

// A v1 append checks the expected revision and answers a mismatch with
// WrongExpectedVersion naming both revisions; an append repeated with the
// same event ids at the same place is idempotent.
func TestAppendExpectedRevisionAndIdempotence(t *testing.T) {
	c := start(t, Options{})
	e1, e2 := ev("A"), ev("A")
	wr, err := c.AppendToStream(ctx(t), "s", kurrentdb.AppendToStreamOptions{StreamState: kurrentdb.NoStream{}}, e1, e2)
	if err != nil {
		t.Fatal(err)
	}
	if wr.NextExpectedVersion != 1 {
		t.Errorf("revision after two events %d; want 1", wr.NextExpectedVersion)
	}
	for _, c2 := range []struct {
		state kurrentdb.StreamState
		text  string
	}{
		{kurrentdb.StreamRevision{Value: 0}, "expecting '0' but got '1'"},
		{kurrentdb.NoStream{}, "expecting 'no_stream' but got '1'"},
	} {
		_, err = c.AppendToStream(ctx(t), "s", kurrentdb.AppendToStreamOptions{StreamState: c2.state}, ev("B"))
		if code(err) != kurrentdb.ErrorCodeWrongExpectedVersion || !strings.Contains(err.Error(), c2.text) {
			t.Errorf("append expecting %v: %v; want wrong expected version %q", c2.state, err, c2.text)
		}
	}
	_, err = c.AppendToStream(ctx(t), "missing", kurrentdb.AppendToStreamOptions{StreamState: kurrentdb.StreamRevision{Value: 3}}, ev("B"))
	if code(err) != kurrentdb.ErrorCodeWrongExpectedVersion || !strings.Contains(err.Error(), "but got 'no_stream'") {
		t.Errorf("append to a missing stream expecting 3: %v", err)
	}
	for _, state := range []kurrentdb.StreamState{kurrentdb.NoStream{}, kurrentdb.Any{}} {
		again, err := c.AppendToStream(ctx(t), "s", kurrentdb.AppendToStreamOptions{StreamState: state}, e1, e2)
		if err != nil || again.NextExpectedVersion != 1 || again.CommitPosition != wr.CommitPosition || again.PreparePosition != wr.PreparePosition {
			t.Errorf("repeat expecting %v: %+v, %v; want the original %+v", state, again, err, wr)
		}
	}
	if got, _ := readStream(c, t, "s", kurrentdb.ReadStreamOptions{}, 10); len(got) != 2 {
		t.Errorf("stream has %d events after repeats; want 2", len(got))
	}
	// A repeat of part of a write is no repeat: refused, not stored twice.
	_, err = c.AppendToStream(ctx(t), "s", kurrentdb.AppendToStreamOptions{StreamState: kurrentdb.NoStream{}}, e1, ev("C"))
	if code(err) != kurrentdb.ErrorCodeWrongExpectedVersion {
		t.Errorf("partial repeat: %v; want wrong expected version", err)
	}
}

// Reading a stream that has no events fails with the not-found answer;
// reads go forwards or backwards from a revision, the start or the end.
func TestReadStream(t *testing.T) {
	c := start(t, Options{})
	if _, err := readStream(c, t, "none", kurrentdb.ReadStreamOptions{}, 10); code(err) != kurrentdb.ErrorCodeResourceNotFound {
		t.Errorf("reading a missing stream: %v; want resource not found", err)
	}
	evs := []kurrentdb.EventData{ev("A"), ev("B"), ev("C")}
	if _, err := c.AppendToStream(ctx(t), "s", kurrentdb.AppendToStreamOptions{}, evs...); err != nil {
		t.Fatal(err)
	}
	types := func(o kurrentdb.ReadStreamOptions, n uint64) string {
		got, err := readStream(c, t, "s", o, n)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, e := range got {
			s = append(s, fmt.Sprintf("%s%d", e.EventType, e.EventNumber))
		}
		return strings.Join(s, " ")
	}
	for _, c := range []struct {
		o    kurrentdb.ReadStreamOptions
		n    uint64
		want string
	}{
		{kurrentdb.ReadStreamOptions{}, 10, "A0 B1 C2"},
		{kurrentdb.ReadStreamOptions{From: kurrentdb.Revision(1)}, 1, "B1"},
		{kurrentdb.ReadStreamOptions{From: kurrentdb.End{}}, 10, ""},
		{kurrentdb.ReadStreamOptions{Direction: kurrentdb.Backwards, From: kurrentdb.End{}}, 1, "C2"},
		{kurrentdb.ReadStreamOptions{Direction: kurrentdb.Backwards, From: kurrentdb.Revision(1)}, 10, "B1 A0"},
	} {
		if got := types(c.o, c.n); got != c.want {
			t.Errorf("read %+v count %d: %q; want %q", c.o, c.n, got, c.want)
		}
	}
}

// $all: positions grow with the log and take room by record size; the
// events of one write share its commit position; a forward read from a
// position includes the event there, a backward one starts before it; the
// log begins with the server's own ($) events.
func TestAllPositions(t *testing.T) {
	c := start(t, Options{})
	if _, err := c.AppendToStream(ctx(t), "a", kurrentdb.AppendToStreamOptions{}, ev("A"), ev("A")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AppendToStream(ctx(t), "b", kurrentdb.AppendToStreamOptions{}, ev("B")); err != nil {
		t.Fatal(err)
	}
	all := readAll(t, c, kurrentdb.ReadAllOptions{}, 100)
	if len(all) != 4 || !strings.HasPrefix(all[0].StreamID, "$") || !strings.HasPrefix(all[0].EventType, "$") {
		t.Fatalf("$all holds %d events, first %+v; want the server's system event and ours", len(all), all[0])
	}
	a0, a1, b0 := all[1].Position, all[2].Position, all[3].Position
	if a0.Commit != a0.Prepare || a1.Commit != a0.Commit || a1.Prepare <= a0.Prepare+1 || b0.Commit <= a1.Prepare {
		t.Errorf("positions %v %v %v: want one commit for a's write, prepares apart by record size, b's after", a0, a1, b0)
	}
	from := readAll(t, c, kurrentdb.ReadAllOptions{From: a1}, 10)
	if len(from) != 2 || from[0].Position != a1 {
		t.Errorf("forward read from %v starts at %v; want the event there", a1, from[0].Position)
	}
	back := readAll(t, c, kurrentdb.ReadAllOptions{Direction: kurrentdb.Backwards, From: a1}, 10)
	if len(back) != 2 || back[0].Position != a0 {
		t.Errorf("backward read from %v returned %d events from %v; want those before it", a1, len(back), back[0].Position)
	}
	if end := readAll(t, c, kurrentdb.ReadAllOptions{Direction: kurrentdb.Backwards, From: kurrentdb.End{}}, 1); end[0].Position != b0 {
		t.Errorf("backward read from the end starts at %v; want %v", end[0].Position, b0)
	}
	if got := all[1].CreatedDate; time.Since(got) > time.Minute || got.After(time.Now().Add(time.Second)) {
		t.Errorf("created date %v", got)
	}
}

// A subscription to $all from a position starts after it, reports when it
// has caught up, then delivers new events; the client's system-event
// filter keeps the server's own events out.
func TestSubscribeToAllFiltersSystemEvents(t *testing.T) {
	srv, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cfg, _ := kurrentdb.ParseConnectionString(srv.URL())
	c, err := kurrentdb.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first, _ := c.AppendToStream(ctx(t), "a", kurrentdb.AppendToStreamOptions{}, ev("A"))
	if _, err := c.AppendToStream(ctx(t), "a", kurrentdb.AppendToStreamOptions{}, ev("B")); err != nil {
		t.Fatal(err)
	}
	sub, err := c.SubscribeToAll(ctx(t), kurrentdb.SubscribeToAllOptions{
		From:   kurrentdb.Position{Commit: first.CommitPosition, Prepare: first.PreparePosition},
		Filter: kurrentdb.ExcludeSystemEventsFilter(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var got []string
	caughtUp := false
	live := false
	for len(got) < 2 {
		e := sub.Recv()
		switch {
		case e.SubscriptionDropped != nil:
			t.Fatalf("dropped: %v", e.SubscriptionDropped.Error)
		case e.CaughtUp != nil:
			caughtUp = true
			if !live {
				live = true
				srv.WriteSystemEvent("$stats-127.0.0.1:2113", "$statsCollected")
				if _, err := c.AppendToStream(ctx(t), "a", kurrentdb.AppendToStreamOptions{}, ev("C")); err != nil {
					t.Fatal(err)
				}
			}
		case e.EventAppeared != nil:
			got = append(got, e.EventAppeared.Event.EventType)
		}
	}
	if !caughtUp || !slices.Equal(got, []string{"B", "C"}) {
		t.Errorf("subscription delivered %v (caught up: %v); want B (after the start position), then C live, no system event", got, caughtUp)
	}
}

// The v2 AppendSession is all or nothing; a stream at another revision
// fails it with the conflict details (stream, expected, actual).
func TestAppendSessionConflict(t *testing.T) {
	c := start(t, Options{})
	if _, err := c.AppendToStream(ctx(t), "b", kurrentdb.AppendToStreamOptions{}, ev("B")); err != nil {
		t.Fatal(err)
	}
	req := func(stream string, state kurrentdb.StreamState) kurrentdb.AppendStreamRequest {
		return kurrentdb.AppendStreamRequest{StreamName: stream, Events: slices.Values([]kurrentdb.EventData{ev("X")}), ExpectedStreamState: state}
	}
	_, err := c.MultiStreamAppend(ctx(t), slices.Values([]kurrentdb.AppendStreamRequest{req("a", kurrentdb.NoStream{}), req("b", kurrentdb.StreamRevision{Value: 5})}))
	var conflict *kurrentdb.StreamRevisionConflictError
	if code(err) != kurrentdb.ErrorCodeStreamRevisionConflict || !errors.As(err, &conflict) ||
		conflict.Stream != "b" || conflict.ExpectedRevision != (kurrentdb.StreamRevision{Value: 5}) || conflict.ActualRevision != (kurrentdb.StreamRevision{Value: 0}) {
		t.Fatalf("session with a stale revision: %v (%+v); want a conflict on b expecting 5, actual 0", err, conflict)
	}
	if _, err := readStream(c, t, "a", kurrentdb.ReadStreamOptions{}, 1); code(err) != kurrentdb.ErrorCodeResourceNotFound {
		t.Errorf("a failed session wrote stream a: %v", err)
	}
	resp, err := c.MultiStreamAppend(ctx(t), slices.Values([]kurrentdb.AppendStreamRequest{req("a", kurrentdb.NoStream{}), req("b", kurrentdb.StreamRevision{Value: 0})}))
	if err != nil || len(resp.Responses) != 2 || resp.Responses[1].StreamRevision != 1 {
		t.Fatalf("session: %+v, %v", resp, err)
	}
}

// AppendRecords checks any stream, written or not, before committing;
// every violated check is reported at once and nothing is written.
func TestAppendRecordsConsistencyChecks(t *testing.T) {
	c := start(t, Options{})
	if _, err := c.AppendToStream(ctx(t), "guarded", kurrentdb.AppendToStreamOptions{}, ev("G"), ev("G")); err != nil {
		t.Fatal(err)
	}
	records := []kurrentdb.AppendRecord{{Stream: "w", Record: ev("W")}, {Stream: "v", Record: ev("V")}, {Stream: "w", Record: ev("W")}}
	_, err := c.AppendRecords(ctx(t), records,
		kurrentdb.StreamStateCheck{Stream: "guarded", ExpectedState: kurrentdb.StreamRevision{Value: 0}},
		kurrentdb.StreamStateCheck{Stream: "w", ExpectedState: kurrentdb.NoStream{}},
		kurrentdb.StreamStateCheck{Stream: "absent", ExpectedState: kurrentdb.StreamExists{}})
	var violated *kurrentdb.AppendConsistencyViolationError
	if code(err) != kurrentdb.ErrorCodeAppendConsistencyViolation || !errors.As(err, &violated) || len(violated.Violations) != 2 {
		t.Fatalf("stale checks: %v; want a consistency violation naming two checks", err)
	}
	if v := violated.Violations[0]; v.CheckIndex != 0 || v.Stream != "guarded" || v.ActualState != (kurrentdb.StreamRevision{Value: 1}) {
		t.Errorf("first violation %+v; want check 0 on guarded, actual 1", v)
	}
	if v := violated.Violations[1]; v.CheckIndex != 2 || v.Stream != "absent" || v.ActualState != (kurrentdb.NoStream{}) {
		t.Errorf("second violation %+v; want check 2 on absent, no stream", v)
	}
	if _, err := readStream(c, t, "w", kurrentdb.ReadStreamOptions{}, 1); code(err) != kurrentdb.ErrorCodeResourceNotFound {
		t.Errorf("a violated append wrote stream w: %v", err)
	}
	resp, err := c.AppendRecords(ctx(t), records, kurrentdb.StreamStateCheck{Stream: "guarded", ExpectedState: kurrentdb.StreamRevision{Value: 1}})
	if err != nil {
		t.Fatal(err)
	}
	revs := map[string]int64{}
	for _, r := range resp.Responses {
		revs[r.Stream] = r.StreamRevision
	}
	if revs["w"] != 1 || revs["v"] != 0 || len(revs) != 2 {
		t.Errorf("revisions %v; want w:1 v:0 (the checked stream is not written)", revs)
	}
	// The records keep the request's order in the log.
	all := readAll(t, c, kurrentdb.ReadAllOptions{Direction: kurrentdb.Backwards, From: kurrentdb.End{}}, 3)
	if all[0].StreamID != "w" || all[1].StreamID != "v" || all[2].StreamID != "w" || int64(all[0].Position.Commit) != resp.Position {
		t.Errorf("log tail %s %s %s at commit %d (response %d); want w v w in reverse", all[0].StreamID, all[1].StreamID, all[2].StreamID, all[0].Position.Commit, resp.Position)
	}
	if got, _ := readStream(c, t, "guarded", kurrentdb.ReadStreamOptions{}, 10); len(got) != 2 {
		t.Errorf("the checked stream has %d events; want 2", len(got))
	}
}

// A server that does not list AppendRecords makes the client refuse it.
func TestWithoutAppendRecords(t *testing.T) {
	c := start(t, Options{NoAppendRecords: true})
	_, err := c.AppendRecords(ctx(t), []kurrentdb.AppendRecord{{Stream: "s", Record: ev("E")}})
	if code(err) != kurrentdb.ErrorCodeUnsupportedFeature {
		t.Errorf("AppendRecords on a server without it: %v; want unsupported feature", err)
	}
}
