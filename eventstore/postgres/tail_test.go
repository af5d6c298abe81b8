package postgres_test

import (
	"context"
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
