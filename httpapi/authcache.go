package httpapi

import (
	"context"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
)

// Auth cache defaults: entries live at most authCacheTTL (a bound on
// staleness should the log tail ever stall unnoticed), and the entries of
// at most authCacheMax customers are kept (past it the cache starts over;
// a customer is used with its merchant's few keys, and key-only lookups
// count as one more customer).
const (
	authCacheTTL = 5 * time.Second
	authCacheMax = 100_000
)

// ResolvedAuth is a directory answer and the log position it covers.
type ResolvedAuth struct {
	Principal     Principal
	Found         bool
	Customer      CustomerRef
	CustomerFound bool
	// Covers is a position the answer includes every change up to;
	// Covered is false when that is not known (nothing may be cached).
	Covers  eventstore.Position
	Covered bool
}

// PositionedDirectory is a Directory that also says how current an answer
// is.
type PositionedDirectory interface {
	ResolveAt(ctx context.Context, digest, customerID string) (ResolvedAuth, error)
}

// AuthCache answers the auth lookup of repeated requests from memory: with
// it, a key and customer used again cost no query. Every request used to
// read them from the read models, a statement per request and about 8% of
// the CPU of an escrow lifecycle (docs/performance.md).
//
// It is kept current by the event log, not by expiry: the cache follows the
// log's tail, and any merchant event (keys, allowlist, business, country)
// empties it, a customer event drops that customer's entries. Two races
// are closed:
//
//   - An answer read from read models that lag the tail would miss a
//     change the tail has already passed. So every answer carries the
//     position its read models cover (read in the same statement), and is
//     kept only if that is at or after the last change the tail has seen.
//   - A change written by this process (a revocation through the API)
//     must count for the very next request, even if the tail has not read
//     it yet: such appends are watched (WatchStore), and no entry is used
//     until the tail has passed them.
//
// A change written by another process counts here once this process's tail
// has read it, milliseconds later, as the read models do. Only complete
// positive answers are cached (the key and, when named, the customer were
// found), so an unknown key or customer is always asked for again. While
// the tail is down nothing is answered from memory.
type AuthCache struct {
	dir   PositionedDirectory
	store eventstore.Store
	log   *zap.Logger
	ttl   time.Duration
	max   int
	now   func() time.Time

	startOnce sync.Once
	stop      context.CancelFunc
	done      chan struct{}

	mu      sync.Mutex
	live    bool                // the tail is following the log
	seen    eventstore.Position // how far the tail has read
	changed eventstore.Position // the last auth change the tail read (or where it started)
	mustSee eventstore.Position // the last auth change this process wrote
	// entries by customer id ("" for key-only lookups), then key digest.
	entries map[string]map[string]authEntry
}

type authEntry struct {
	p       Principal
	c       CustomerRef
	expires time.Time
}

// NewAuthCache caches dir's answers, following store's log. Resolve starts
// the tail on first use; Close stops it.
func NewAuthCache(dir PositionedDirectory, store eventstore.Store, log *zap.Logger) *AuthCache {
	return &AuthCache{dir: dir, store: store, log: orNop(log), ttl: authCacheTTL, max: authCacheMax, now: time.Now,
		entries: map[string]map[string]authEntry{}, done: make(chan struct{})}
}

var (
	merchantStreamPrefix = app.MerchantKind.StreamName("")
	customerStreamPrefix = app.CustomerKind.StreamName("")
)

// Resolve implements Directory.
func (a *AuthCache) Resolve(ctx context.Context, digest, customerID string) (Principal, bool, CustomerRef, bool, error) {
	a.startOnce.Do(a.start)
	if e, ok := a.lookup(digest, customerID); ok {
		return e.p, true, e.c, customerID != "", nil
	}
	r, err := a.dir.ResolveAt(ctx, digest, customerID)
	if err != nil {
		return Principal{}, false, CustomerRef{}, false, err
	}
	if r.Found && r.Covered && (customerID == "" || r.CustomerFound) {
		a.keep(digest, customerID, r)
	}
	return r.Principal, r.Found, r.Customer, r.CustomerFound, nil
}

func (a *AuthCache) lookup(digest, customerID string) (authEntry, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.live || a.seen.Less(a.mustSee) {
		return authEntry{}, false
	}
	e, ok := a.entries[customerID][digest]
	if !ok || !a.now().Before(e.expires) {
		return authEntry{}, false
	}
	return e, true
}

// keep stores an answer unless the tail has read a change it may predate.
func (a *AuthCache) keep(digest, customerID string, r ResolvedAuth) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.live || r.Covers.Less(a.changed) {
		return
	}
	byDigest := a.entries[customerID]
	if byDigest == nil {
		if len(a.entries) >= a.max {
			clear(a.entries)
		}
		byDigest = map[string]authEntry{}
		a.entries[customerID] = byDigest
	}
	byDigest[digest] = authEntry{p: r.Principal, c: r.Customer, expires: a.now().Add(a.ttl)}
}

func (a *AuthCache) start() {
	ctx, cancel := context.WithCancel(context.Background())
	a.stop = cancel
	go func() {
		defer close(a.done)
		a.follow(ctx)
	}()
}

// Close stops following the log.
func (a *AuthCache) Close() {
	a.startOnce.Do(func() { close(a.done) }) // never started: nothing to stop
	if a.stop != nil {
		a.stop()
	}
	<-a.done
}

// follow tails the log from its head, restarting after a failure; whatever
// was cached before a restart is dropped, since the events in between are
// not read.
func (a *AuthCache) follow(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for {
		head, err := a.store.Head(ctx)
		if err == nil {
			a.mu.Lock()
			a.live, a.seen = true, head
			if a.changed.Less(head) {
				a.changed = head
			}
			a.mu.Unlock()
			err = a.store.Subscribe(ctx, head, a.apply)
		}
		a.mu.Lock()
		a.live = false
		clear(a.entries)
		a.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		a.log.Warn("auth cache: cannot follow the event log; keys are read from the database meanwhile", zap.Error(err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// apply drops what the events change.
func (a *AuthCache) apply(_ context.Context, events []eventstore.RecordedEvent) error {
	if len(events) == 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range events {
		if strings.HasPrefix(e.Stream, merchantStreamPrefix) {
			clear(a.entries)
			a.changed = e.Position
		} else if id, ok := strings.CutPrefix(e.Stream, customerStreamPrefix); ok {
			delete(a.entries, id)
			a.changed = e.Position
		}
	}
	a.seen = events[len(events)-1].Position
	return nil
}

// wrote records an auth change this process appended at pos.
func (a *AuthCache) wrote(pos eventstore.Position) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mustSee.Less(pos) {
		a.mustSee = pos
	}
}

// WatchStore returns store with its appends to merchant and customer
// streams reported to the cache (see AuthCache).
func (a *AuthCache) WatchStore(store eventstore.Store) eventstore.Store {
	return watchedStore{Store: store, cache: a}
}

type watchedStore struct {
	eventstore.Store
	cache *AuthCache
}

func (w watchedStore) Append(ctx context.Context, appends ...eventstore.StreamAppend) (eventstore.AppendResult, error) {
	res, err := w.Store.Append(ctx, appends...)
	if err != nil {
		return res, err
	}
	for _, sa := range appends {
		if len(sa.Events) > 0 && (strings.HasPrefix(sa.Stream, merchantStreamPrefix) || strings.HasPrefix(sa.Stream, customerStreamPrefix)) {
			w.cache.wrote(res.Position)
			break
		}
	}
	return res, err
}
