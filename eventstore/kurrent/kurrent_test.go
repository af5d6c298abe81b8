package kurrent

import (
	"errors"
	"os"
	"testing"

	"github.com/kurrent-io/KurrentDB-Client-Go/kurrentdb"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/storetest"
)

// TestConformance runs the shared suite against the KurrentDB server named
// by KURRENTDB_URL (25.1 or later, for multi-stream appends), e.g.
// KURRENTDB_URL='kurrentdb://localhost:2113?tls=false'.
func TestConformance(t *testing.T) {
	url := os.Getenv("KURRENTDB_URL")
	if url == "" {
		t.Skip("KURRENTDB_URL is not set: the KurrentDB conformance run needs a KurrentDB 25.1+ server, " +
			"and none can run on this machine (no Docker, no server package); set KURRENTDB_URL to run it elsewhere")
	}
	storetest.RunWithLimits(t, func(t *testing.T) eventstore.Store {
		s, err := Open(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}, storetest.Limits{NoZeroEventMultiStream: true}) // MultiStreamAppend rejects a stream without events
}

func TestMetadataRoundTrip(t *testing.T) {
	for _, meta := range []string{`{"causation":"c-1","n":2}`, `[1,2]`, `"text"`, `null`} {
		wrapped, err := wrapMetadata([]byte(meta))
		if err != nil {
			t.Fatal(err)
		}
		// The server adds its own properties to what it stores.
		stored := append(wrapped[:len(wrapped)-1:len(wrapped)-1], []byte(`,"$schema.name":"T","$schema.data-format":"Json"}`)...)
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
