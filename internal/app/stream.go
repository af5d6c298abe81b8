// Package app runs commands: it loads aggregates from their streams, lets the
// domain decide, and appends every resulting event in one atomic append with
// an expected revision per stream, retrying on concurrency conflicts.
package app

import (
	"container/list"
	"context"
	"sync"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/domain"
)

// Kind describes one aggregate type: how its stream is named and how its
// events fold into state. Apply must not mutate the state it is given in
// place (states are shared through the cache): copy slices and maps.
type Kind[S any] struct {
	Name     string // stream name prefix, e.g. "customer"
	Registry domain.Registry
	Apply    func(S, domain.Event) S
	// Snapshot names the format of the kind's snapshots (snapshot.go), ""
	// for none. S is stored as JSON: give the format a new name whenever
	// S or Apply changes, and the snapshots of the old one are ignored.
	Snapshot string
}

// StreamName is the stream of aggregate id.
func (k Kind[S]) StreamName(id string) string { return k.Name + "-" + id }

// cache keeps folded states by stream. A cached state is used without reading
// the store: the append's expected revision proves it current, and a conflict
// evicts it. That keeps the hot path free of stream reads, and a cold load
// reads only the events after the cached revision (never the whole stream
// when it is cached), so load time does not grow with stream length.
type cache struct {
	mu    sync.Mutex
	max   int
	items map[string]*list.Element
	order *list.List
	// floors are revisions below which a stream's state is not kept: the
	// stream has an event there this cache may not have seen (invalidate).
	floors map[string]int64
}

type cached struct {
	stream string
	state  any
	rev    int64 // -1: stream does not exist
}

func newCache(max int) *cache {
	return &cache{max: max, items: map[string]*list.Element{}, order: list.New()}
}

func (c *cache) get(stream string) (cached, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[stream]
	if !ok {
		return cached{}, false
	}
	c.order.MoveToFront(el)
	return *el.Value.(*cached), true
}

func (c *cache) put(v cached) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if floor, ok := c.floors[v.stream]; ok && v.rev < floor {
		return // folded before an event known to be there: stale
	}
	if el, ok := c.items[v.stream]; ok {
		// Never move a cached state backwards.
		if el.Value.(*cached).rev > v.rev {
			return
		}
		el.Value = &v
		c.order.MoveToFront(el)
		return
	}
	c.items[v.stream] = c.order.PushFront(&v)
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*cached).stream)
	}
}

func (c *cache) evict(stream string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[stream]; ok {
		c.order.Remove(el)
		delete(c.items, stream)
	}
}

// invalidate drops stream's cached state unless it includes revision rev,
// and keeps any state folded without it from being cached later (a load
// that read the stream before that event was appended). Floors are few
// (an erasure's): past the cache's bound they start over.
func (c *cache) invalidate(stream string, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[stream]; ok && el.Value.(*cached).rev < rev {
		c.order.Remove(el)
		delete(c.items, stream)
	}
	if c.floors == nil || len(c.floors) >= c.max {
		c.floors = map[string]int64{}
	}
	if f, ok := c.floors[stream]; !ok || f < rev {
		c.floors[stream] = rev
	}
}

// Invalidate tells the engine that stream has an event at revision rev,
// appended by another process: a cached state without it is dropped, so
// the next command or read folds it from the store. Commands that write a
// stream need no such word (their expected revision catches a stale
// state); it is for what is read without being written, and must count
// at once (a customer's erasure).
func (e *Engine) Invalidate(stream string, rev uint64) { e.cache.invalidate(stream, int64(rev)) }

// load folds a stream, starting from the cached state when there is one and
// reading only the events after it. Unless fresh, a cached state is
// returned without reading the store at all (cachedOnly). Without a cached
// state it starts from the stream's snapshot when there is a usable one
// (snapshot.go), and it writes a new snapshot when it folded past a
// multiple of the engine's SnapshotEvery.
func load[S any](ctx context.Context, e *Engine, k Kind[S], stream string, fresh bool) (state S, rev int64, cachedOnly bool, err error) {
	c := e.cache
	rev = -1
	from := uint64(0)
	var snapID uuid.UUID // the event a snapshot starts after, to check
	checkSnap := false
	if hit, ok := c.get(stream); ok {
		state, rev = hit.state.(S), hit.rev
		if !fresh {
			return state, rev, true, nil
		}
		from = uint64(rev + 1)
	} else if st, r, id, ok := readSnapshot(ctx, e, k, stream); ok {
		// Read from the snapshot's own event, to check it is the one the
		// snapshot names.
		state, rev, from, snapID, checkSnap = st, int64(r), r, id, true
	}
	since := rev
	var last uuid.UUID
	const page = 1000
	for {
		events, err := e.store.ReadStream(ctx, stream, from, page)
		if err != nil {
			return state, rev, false, err
		}
		full := len(events) == page
		if checkSnap {
			checkSnap = false
			if len(events) == 0 || events[0].Revision != uint64(rev) || events[0].ID != snapID {
				// Not this stream's state: replay it whole.
				var zero S
				state, rev, since, from = zero, -1, -1, 0
				continue
			}
			last, events = events[0].ID, events[1:]
		}
		for _, re := range events {
			ev, err := k.Registry.Decode(re.Type, re.Data)
			if err != nil {
				return state, rev, false, err
			}
			state = k.Apply(state, ev)
			rev = int64(re.Revision)
			last = re.ID
		}
		if !full {
			break
		}
		from = uint64(rev + 1)
	}
	c.put(cached{stream: stream, state: state, rev: rev})
	if e.snapshotDue(since, rev) {
		writeSnapshot(e, k, stream, uint64(rev), last, state)
	}
	return state, rev, false, nil
}
