// Conformance cases of concurrent appends.

package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/escrowd/escrowd/eventstore"
)

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
