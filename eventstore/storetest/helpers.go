// Helpers of the conformance cases.

package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/eventstore"
)

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
