package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
)

// TestTailWindowFollowers runs followers against a shared tail whose window
// is only a few events wide, so it is trimmed over and over while they read:
// a fast follower stays inside it, a slow one keeps falling out of it (and
// reads the database) and back in, and a late one starts from the
// beginning. Each must see every event of the concurrent writers exactly
// once, in global order, with each stream's revisions consecutive.
func TestTailWindowFollowers(t *testing.T) {
	s, _ := newStore(t)
	postgres.SetTailWindow(s, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := "tail-" + uuid.NewString()[:8]
	const writers, appends = 8, 40
	total := writers * appends * 2 // two events per append

	type seen struct {
		ids  map[uuid.UUID]bool
		last eventstore.Position
		revs map[string]uint64
	}
	follow := func(name string, after eventstore.Position, pause time.Duration, done chan<- error) {
		st := seen{ids: map[uuid.UUID]bool{}, revs: map[string]uint64{}}
		fctx, stop := context.WithCancel(ctx)
		defer stop()
		err := s.Subscribe(fctx, after, func(_ context.Context, evs []eventstore.RecordedEvent) error {
			for _, e := range evs {
				if len(e.Stream) < len(prefix) || e.Stream[:len(prefix)] != prefix {
					continue
				}
				if !st.last.Less(e.Position) {
					return fmt.Errorf("%s: position %v after %v", name, e.Position, st.last)
				}
				st.last = e.Position
				if st.ids[e.ID] {
					return fmt.Errorf("%s: event %s twice", name, e.ID)
				}
				st.ids[e.ID] = true
				if r, ok := st.revs[e.Stream]; ok && e.Revision != r+1 {
					return fmt.Errorf("%s: stream %s revision %d after %d", name, e.Stream, e.Revision, r)
				} else if !ok && e.Revision != 0 {
					return fmt.Errorf("%s: stream %s starts at revision %d", name, e.Stream, e.Revision)
				}
				st.revs[e.Stream] = e.Revision
			}
			if pause > 0 {
				time.Sleep(pause)
			}
			if len(st.ids) == total {
				stop()
			}
			return nil
		})
		if len(st.ids) != total {
			done <- fmt.Errorf("%s: saw %d of %d events (%v)", name, len(st.ids), total, err)
			return
		}
		done <- nil
	}

	start, err := s.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 3)
	go follow("fast", start, 0, done)
	go follow("slow", start, 3*time.Millisecond, done)

	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range appends {
				stream := fmt.Sprintf("%s-%d", prefix, w)
				exp := eventstore.Exact(uint64(2*i - 1))
				if i == 0 {
					exp = eventstore.NoStream
				}
				_, err := s.Append(ctx, eventstore.StreamAppend{Stream: stream, Expected: exp, Events: []eventstore.EventData{
					{ID: uuid.New(), Type: "T", Data: []byte(`{}`)},
					{ID: uuid.New(), Type: "T", Data: []byte(`{}`)},
				}})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	go follow("late", start, 0, done)
	for range 3 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	// The fast follower, at least, was served from memory.
	if postgres.TailHits(s) == 0 {
		t.Fatal("no read was answered from the shared tail")
	}
}

// TestTailFollowersFromEveryPosition: once the shared tail has trimmed its
// window many times, a follower starting from any position of the log,
// the window's first event and the one before it included, gets exactly
// the events after that position: none skipped, none twice.
func TestTailFollowersFromEveryPosition(t *testing.T) {
	s, _ := newStore(t)
	postgres.SetTailWindow(s, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start, err := s.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A driver follower keeps the tail running; each event is appended on
	// its own once the previous one reached it, so the window moves (and
	// is trimmed) one event at a time.
	var (
		mu  sync.Mutex
		log []eventstore.RecordedEvent
	)
	seen := make(chan struct{}, 1)
	dctx, stopDriver := context.WithCancel(ctx)
	driverDone := make(chan error, 1)
	go func() {
		driverDone <- s.Subscribe(dctx, start, func(_ context.Context, evs []eventstore.RecordedEvent) error {
			mu.Lock()
			log = append(log, evs...)
			mu.Unlock()
			select {
			case seen <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	const n = 23
	stream := "edges-" + uuid.NewString()[:8]
	for i := range n {
		exp := eventstore.Exact(uint64(i - 1))
		if i == 0 {
			exp = eventstore.NoStream
		}
		if _, err := s.Append(ctx, eventstore.StreamAppend{Stream: stream, Expected: exp,
			Events: []eventstore.EventData{{ID: uuid.New(), Type: "T", Data: []byte(`{}`)}}}); err != nil {
			t.Fatal(err)
		}
		for {
			mu.Lock()
			got := len(log)
			mu.Unlock()
			if got == i+1 {
				break
			}
			select {
			case <-seen:
			case <-ctx.Done():
				t.Fatalf("driver saw %d of %d events", got, i+1)
			}
		}
	}
	mu.Lock()
	all := append([]eventstore.RecordedEvent(nil), log...)
	mu.Unlock()
	// Followers from the start and from every event's position.
	froms := []eventstore.Position{start}
	for _, e := range all[:len(all)-1] {
		froms = append(froms, e.Position)
	}
	for k, from := range froms {
		want := all[k:]
		var got []eventstore.RecordedEvent
		fctx, stop := context.WithTimeout(ctx, 10*time.Second)
		err := s.Subscribe(fctx, from, func(_ context.Context, evs []eventstore.RecordedEvent) error {
			got = append(got, evs...)
			if got[len(got)-1].ID == all[len(all)-1].ID {
				stop()
			}
			return nil
		})
		stop()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("follower from event %d: %v", k, err)
		}
		if len(got) != len(want) {
			t.Fatalf("follower from event %d (%v) got %d events, want %d", k, from, len(got), len(want))
		}
		for i := range want {
			if got[i].ID != want[i].ID || got[i].Position != want[i].Position {
				t.Fatalf("follower from event %d: event %d is %v, want %v", k, i, got[i].Position, want[i].Position)
			}
		}
	}
	stopDriver()
	if err := <-driverDone; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if postgres.TailHits(s) == 0 {
		t.Fatal("no read was answered from the shared tail")
	}
}
