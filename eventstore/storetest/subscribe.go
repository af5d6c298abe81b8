// Conformance cases of Subscribe.

package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/eventstore"
)

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
