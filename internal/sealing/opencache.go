package sealing

import (
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/internal/keyring"
)

// openCache keeps the data of recently opened events by event id. Every
// subscriber of a process (each projector, the webhook subscriber) is
// handed the same events; with the cache the first opens an event and the
// others take its data, where each would decrypt every sealed field again.
//
// What it keeps it keeps no longer than the keyring keeps a data key
// (keyring.CacheTTL), so an erasure reaches the subscribers of other
// processes as soon as it reaches their keyrings; and a key destroyed in
// or forgotten in this process (keys.Destroys moved) drops everything
// opened before.
type openCache struct {
	keys interface{ Destroys() uint64 } // nil: no destruction to follow
	ttl  time.Duration
	now  func() time.Time

	mu      sync.Mutex
	entries map[uuid.UUID]openedEntry
	order   []uuid.UUID // ring of the ids in entries, oldest at next
	next    int
	epoch   uint64 // keys.Destroys() when entries were filled
}

type openedEntry struct {
	data    []byte
	expires time.Time
}

// openCacheSize bounds the events kept: a few batches of the log's tail,
// which is what the subscribers of one process read at about one time.
const openCacheSize = 8192

func newOpenCache(keys Keys) *openCache {
	c := &openCache{ttl: keyring.CacheTTL, now: time.Now, entries: make(map[uuid.UUID]openedEntry, openCacheSize),
		order: make([]uuid.UUID, 0, openCacheSize)}
	if d, ok := keys.(interface{ Destroys() uint64 }); ok {
		c.keys = d
	}
	return c
}

// sync drops every entry when a key was destroyed since they were made.
// c.mu must be held.
func (c *openCache) sync() {
	if c.keys == nil {
		return
	}
	if e := c.keys.Destroys(); e != c.epoch {
		clear(c.entries)
		c.order, c.next, c.epoch = c.order[:0], 0, e
	}
}

func (c *openCache) get(id uuid.UUID) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sync()
	e, ok := c.entries[id]
	if !ok || !c.now().Before(e.expires) {
		return nil, false
	}
	return e.data, true
}

// put keeps data, opened with the keys as they were at epoch (Destroys
// before the opening): data opened while a key was being destroyed is not
// kept.
func (c *openCache) put(id uuid.UUID, data []byte, epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sync()
	if epoch != c.epoch {
		return
	}
	if _, ok := c.entries[id]; !ok {
		if len(c.order) < openCacheSize {
			c.order = append(c.order, id)
		} else {
			delete(c.entries, c.order[c.next])
			c.order[c.next] = id
			c.next = (c.next + 1) % openCacheSize
		}
	}
	c.entries[id] = openedEntry{data: data, expires: c.now().Add(c.ttl)}
}

// epochNow is what put compares: Destroys as the caller starts to open.
func (c *openCache) epochNow() uint64 {
	if c.keys == nil {
		return 0
	}
	return c.keys.Destroys()
}
