package postgres

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/escrowd/escrowd/eventstore"
)

// tail is one reader of the log's newest events shared by every
// subscription of the store. Without it each subscriber (every projector,
// the webhook subscriber) ran its own query on every wake-up and every quick
// re-poll, so one append cost a query per follower; with it an append costs
// one query however many follow, and followers near the end read memory.
//
// The window holds every event after start up to head, in log order, as
// ReadAll returned them; ReadAll only returns events whose transaction is
// older than every running log writer, so no event can later appear inside the
// window and a follower whose position is in it may take the events after
// its position from memory. Followers outside the window (catching up from
// far behind, or ahead of a tail that just started) read the database.
type tail struct {
	s     *Store
	mu    sync.Mutex
	state int // 0 not started, 1 running
	start eventstore.Position
	head  eventstore.Position
	buf   []eventstore.RecordedEvent
	moved *broadcaster // head advanced
	max   int
	// hits counts the reads answered from the window (memory, not the
	// database): how much the tail saves.
	hits atomic.Int64
	// reads counts the tail's own reads of the database, empty ones too.
	reads atomic.Int64
	done  chan struct{}
}

func newTail(s *Store) *tail {
	return &tail{s: s, moved: newBroadcaster(), max: 4096, done: make(chan struct{})}
}

// ensure starts the tail at the log's current visible head. Every event
// committed later has a higher position (its transaction is newer than the
// visibility horizon Head respected), so starting there skips nothing.
func (t *tail) ensure(ctx context.Context, bg context.Context) {
	t.mu.Lock()
	if t.state != 0 {
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	head, err := t.s.Head(ctx)
	if err != nil {
		return // followers read the database; the next Subscribe retries
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state != 0 {
		return
	}
	t.state, t.start, t.head = 1, head, head
	go func() {
		defer close(t.done)
		t.run(bg)
	}()
}

// since returns up to limit events after pos from the window; ok is false
// when pos is outside it.
func (t *tail) since(pos eventstore.Position, limit int) ([]eventstore.RecordedEvent, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state == 0 || pos.Less(t.start) || t.head.Less(pos) {
		return nil, false
	}
	i := sort.Search(len(t.buf), func(i int) bool { return pos.Less(t.buf[i].Position) })
	j := min(len(t.buf), i+limit)
	t.hits.Add(1)
	if i == j {
		return nil, true
	}
	// Shared, not copied: buffered events are never changed, appends go
	// past len (and the capped slice never sees them), and trimming moves
	// the window to a new array.
	return t.buf[i:j:j], true
}

// run follows the log's end: woken by appends (in process and NOTIFY),
// re-polling quickly after a wake-up that found nothing yet visible.
func (t *tail) run(ctx context.Context) {
	const batch = 500
	fast := 0
	for ctx.Err() == nil {
		gen := t.s.wake.generation()
		t.mu.Lock()
		head := t.head
		t.mu.Unlock()
		events, err := t.s.ReadAll(ctx, head, batch)
		t.reads.Add(1)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if len(events) > 0 {
			t.mu.Lock()
			t.buf = append(t.buf, events...)
			// The window keeps between max and 2·max events: trimming only
			// when it doubled copies each event at most once (trimming on
			// every append copied the whole window per batch of one event).
			if len(t.buf) > 2*t.max {
				over := len(t.buf) - t.max
				t.start = t.buf[over-1].Position
				t.buf = append(make([]eventstore.RecordedEvent, 0, 2*t.max+batch), t.buf[over:]...)
			}
			t.head = events[len(events)-1].Position
			t.mu.Unlock()
			t.moved.broadcast()
			fast = 0
			if len(events) == batch {
				continue
			}
		}
		wait := t.s.PollInterval
		if fast > 0 {
			wait = time.Millisecond * time.Duration(1<<min(6, 12-fast)) / 2
			fast--
		}
		woke, err := t.s.wake.wait(ctx, gen, wait)
		if err != nil {
			return
		}
		if woke {
			fast = 12
		}
	}
}
