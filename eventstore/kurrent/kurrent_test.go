package kurrent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/kurrent-io/KurrentDB-Client-Go/kurrentdb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/kurrent/kurrenttest"
	"github.com/escrowd/escrowd/eventstore/storetest"
)

// TestConformance runs the shared suite against the KurrentDB server named
// by KURRENTDB_URL (e.g. 'kurrentdb://localhost:2113?tls=false'), or,
// without it, against the in-memory protocol server (kurrenttest).
func TestConformance(t *testing.T) {
	storetest.RunWithLimits(t, func(t *testing.T) eventstore.Store {
		return openTestStore(t, kurrenttest.URL(t))
	}, storetest.Limits{EventIDsPerStream: true})
}

func openTestStore(t *testing.T, url string) *Store {
	s, err := Open(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestMetadataRoundTrip(t *testing.T) {
	for _, meta := range []string{`{"causation":"c-1","n":2}`, `[1,2]`, `"text"`, `null`} {
		wrapped, err := wrapMetadata([]byte(meta))
		if err != nil {
			t.Fatal(err)
		}
		// The server adds its own properties to what it stores.
		stored := append(wrapped[:len(wrapped)-1:len(wrapped)-1], []byte(`,"$schema.name":"T","$schema.format":"Json"}`)...)
		if got := unwrapMetadata(stored); string(got) != meta {
			t.Errorf("metadata %s came back as %s", meta, got)
		}
	}
	if m, err := wrapMetadata(nil); err != nil || m != nil {
		t.Errorf("nil metadata wrapped as %s, %v", m, err)
	}
	if _, err := wrapMetadata([]byte(`{bad`)); err == nil {
		t.Error("invalid metadata JSON accepted")
	}
	if got := unwrapMetadata([]byte(`{"$schema.name":"T"}`)); got != nil {
		t.Errorf("server-only properties came back as metadata %s", got)
	}
	foreign := `{"user":"x"}`
	if got := unwrapMetadata([]byte(foreign)); string(got) != foreign {
		t.Errorf("another client's metadata came back as %s", got)
	}
}

func TestExpectedRevisionMapping(t *testing.T) {
	cases := map[eventstore.ExpectedRevision]int64{
		eventstore.Any:      -2,
		eventstore.NoStream: -1,
		eventstore.Exact(0): 0,
		eventstore.Exact(7): 7,
	}
	for in, want := range cases {
		var got int64
		switch v := streamState(in).(type) {
		case kurrentdb.Any:
			got = -2
		case kurrentdb.NoStream:
			got = -1
		case kurrentdb.StreamRevision:
			got = int64(v.Value)
		default:
			t.Fatalf("%s mapped to %T", in, v)
		}
		if got != want {
			t.Errorf("%s mapped to %d; want %d", in, got, want)
		}
	}
}

func TestConflictDetails(t *testing.T) {
	if got := actualFromMessage("[ErrorCodeWrongExpectedVersion] ...: wrong expected version: expecting '5' but got '2'"); got != 2 {
		t.Errorf("actual revision %d; want 2", got)
	}
	if got := actualFromMessage("wrong expected version: expecting '0' but got 'no_stream'"); got != -1 {
		t.Errorf("actual revision %d for a missing stream; want -1", got)
	}
	if got := actualRevision(kurrentdb.StreamRevision{Value: 4}); got != 4 {
		t.Errorf("actual revision %d; want 4", got)
	}
	if got := actualRevision(kurrentdb.NoStream{}); got != -1 {
		t.Errorf("actual revision %d for NoStream; want -1", got)
	}
	// Errors that are not the server's conflict answers pass through.
	other := errors.New("connection refused")
	if err := mapAppendError(other, []eventstore.StreamAppend{{Stream: "s"}}); err != other {
		t.Errorf("mapAppendError changed %v into %v", other, err)
	}
}

func TestSystemEvents(t *testing.T) {
	for _, c := range []struct {
		stream, typ string
		system      bool
	}{
		{"escrow-1", "EscrowOpened", false},
		{"$stats-0.0.0.0:2113", "$statsCollected", true},
		{"$$escrow-1", "$metadata", true},
		{"$ce-escrow", "EscrowOpened", true},
		{"escrow-1", "$>", true},
	} {
		e := &kurrentdb.RecordedEvent{StreamID: c.stream, EventType: c.typ}
		if isSystem(e) != c.system {
			t.Errorf("isSystem(%s, %s) = %v", c.stream, c.typ, !c.system)
		}
	}
}

func TestAllPosition(t *testing.T) {
	if _, ok := allPosition(eventstore.Start).(kurrentdb.Start); !ok {
		t.Error("Start does not map to the start of $all")
	}
	p, ok := allPosition(eventstore.Position{Commit: 10, Prepare: 9}).(kurrentdb.Position)
	if !ok || p.Commit != 10 || p.Prepare != 9 {
		t.Errorf("position mapped to %#v", p)
	}
}

// TestServerWithoutAppendRecords: on a server that has only the
// AppendSession (KurrentDB 25.1), appends that write every stream they name
// still go through atomically with their expected revisions, and an append
// that checks a stream without writing it is refused with ErrUnsupported,
// writing nothing, rather than made without its check.
func TestServerWithoutAppendRecords(t *testing.T) {
	srv, err := kurrenttest.Start(kurrenttest.Options{Version: "25.1.0", NoAppendRecords: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	s := openTestStore(t, srv.URL())
	ctx := context.Background()
	ev := func() []eventstore.EventData {
		return []eventstore.EventData{{ID: uuid.New(), Type: "E", Data: []byte(`{}`)}}
	}
	res, err := s.Append(ctx, eventstore.StreamAppend{Stream: "a", Expected: eventstore.NoStream, Events: ev()},
		eventstore.StreamAppend{Stream: "b", Expected: eventstore.NoStream, Events: ev()})
	if err != nil || res.Revisions["a"] != 0 || res.Revisions["b"] != 0 {
		t.Fatalf("multi-stream append: %+v, %v", res, err)
	}
	_, err = s.Append(ctx, eventstore.StreamAppend{Stream: "a", Expected: eventstore.Exact(0), Events: ev()},
		eventstore.StreamAppend{Stream: "b", Expected: eventstore.NoStream, Events: ev()})
	var ce *eventstore.ConcurrencyError
	if !errors.As(err, &ce) || ce.Stream != "b" || ce.Actual != 0 {
		t.Fatalf("stale multi-stream append: %v; want a conflict on b", err)
	}
	_, err = s.Append(ctx, eventstore.StreamAppend{Stream: "a", Expected: eventstore.Exact(0), Events: ev()},
		eventstore.StreamAppend{Stream: "b", Expected: eventstore.Exact(0)})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("guarded append: %v; want ErrUnsupported", err)
	}
	if evs, _ := s.ReadStream(ctx, "a", 0, 0); len(evs) != 1 {
		t.Errorf("stream a has %d events; want 1", len(evs))
	}
	if err := s.CheckServer(ctx); err == nil || !strings.Contains(err.Error(), "AppendRecords") {
		t.Errorf("CheckServer on a server without AppendRecords: %v", err)
	}
}

// TestCheckServer: a server with AppendRecords passes, and the check
// writes nothing.
func TestCheckServer(t *testing.T) {
	s := openTestStore(t, kurrenttest.URL(t))
	ctx := context.Background()
	before, err := s.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CheckServer(ctx); err != nil {
		t.Fatal(err)
	}
	if evs, err := s.ReadStream(ctx, serverCheckStream, 0, 0); err != nil || len(evs) != 0 {
		t.Errorf("the check wrote %d events (%v)", len(evs), err)
	}
	if after, _ := s.Head(ctx); after != before {
		t.Errorf("head moved from %v to %v", before, after)
	}
}

// TestClientLog: the client's chatter and the errors of calls the adapter
// cancels itself are dropped; other warnings and errors are logged.
func TestClientLog(t *testing.T) {
	var buf bytes.Buffer
	prev := log.Writer()
	log.SetOutput(&buf)
	defer log.SetOutput(prev)
	clientLog(kurrentdb.LogDebug, "trying candidate %s", "x")
	clientLog(kurrentdb.LogInfo, "discovery attempt %d", 1)
	clientLog(kurrentdb.LogError, "subscription has dropped. Reason: %v", status.Error(codes.Canceled, "context canceled"))
	if buf.Len() != 0 {
		t.Errorf("logged %q", buf.String())
	}
	clientLog(kurrentdb.LogError, "unexpected exception: %v", status.Error(codes.Unavailable, "connection refused"))
	if !strings.Contains(buf.String(), "kurrentdb: [error] unexpected exception") || !strings.Contains(buf.String(), "connection refused") {
		t.Errorf("an unavailable server was logged as %q", buf.String())
	}
}

// TestSystemEventsAtTheTail: Head and Last pass over the server's own
// events at the end of $all, and a subscriber never gets them.
func TestSystemEventsAtTheTail(t *testing.T) {
	srv := kurrenttest.Serve(t)
	s := openTestStore(t, srv.URL())
	ctx := context.Background()
	res, err := s.Append(ctx, eventstore.StreamAppend{Stream: "a", Expected: eventstore.NoStream,
		Events: []eventstore.EventData{{ID: uuid.New(), Type: "E", Data: []byte(`{}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 150 { // more than a page of Head's second read
		srv.WriteSystemEvent(fmt.Sprintf("$stats-%d", i), "$statsCollected")
	}
	for _, f := range []func(context.Context) (eventstore.Position, error){s.Head, s.Last} {
		if got, err := f(ctx); err != nil || got != res.Position {
			t.Errorf("head/last %v, %v; want the last event of ours, %v", got, err, res.Position)
		}
	}
}

// TestSubscribeHandsOverBatches: events that arrived while the handler was
// busy come in one call, in order, each once.
func TestSubscribeHandsOverBatches(t *testing.T) {
	s := openTestStore(t, kurrenttest.URL(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := "batch-" + uuid.NewString()
	var want []uuid.UUID
	for range 50 {
		e := eventstore.EventData{ID: uuid.New(), Type: "E", Data: []byte(`{}`)}
		want = append(want, e.ID)
		if _, err := s.Append(ctx, eventstore.StreamAppend{Stream: stream, Expected: eventstore.Any, Events: []eventstore.EventData{e}}); err != nil {
			t.Fatal(err)
		}
	}
	var (
		got     []uuid.UUID
		largest int
	)
	done := errors.New("done")
	err := s.Subscribe(ctx, eventstore.Start, func(_ context.Context, evs []eventstore.RecordedEvent) error {
		time.Sleep(20 * time.Millisecond) // a busy projection: more arrive meanwhile
		largest = max(largest, len(evs))
		for _, e := range evs {
			if e.Stream == stream {
				got = append(got, e.ID)
			}
		}
		if len(got) >= len(want) {
			return done
		}
		return nil
	})
	if !errors.Is(err, done) {
		t.Fatalf("subscribe: %v", err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("subscriber got %d events %v; want %d in order", len(got), got, len(want))
	}
	if largest < 2 {
		t.Errorf("every call carried one event: no batching")
	}
}
