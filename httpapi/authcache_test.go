package httpapi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// countingDirectory answers every lookup with answer (covering covers) and
// counts the lookups.
type countingDirectory struct {
	mu     sync.Mutex
	calls  int
	answer ResolvedAuth
}

func (d *countingDirectory) ResolveAt(_ context.Context, _, customerID string) (ResolvedAuth, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	a := d.answer
	if customerID != "" && a.CustomerFound {
		a.Customer.ID = customerID
	}
	return a, nil
}

func (d *countingDirectory) set(a ResolvedAuth) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.answer = a
}

func (d *countingDirectory) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls
}

type authCacheFixture struct {
	t      *testing.T
	cache  *AuthCache
	dir    *countingDirectory
	store  *postgres.Store // the cache's store (its tail)
	other  *postgres.Store // another process's store: appends the cache does not watch
	engine eventstore.Store
}

func newAuthCacheFixture(t *testing.T) *authCacheFixture {
	t.Helper()
	pool := pgtest.NewPool(t)
	store, other := postgres.New(pool), postgres.New(pool)
	t.Cleanup(store.Close)
	t.Cleanup(other.Close)
	dir := &countingDirectory{}
	c := NewAuthCache(dir, store, zap.NewExample())
	// A stopped clock: entries do not expire on a slow run (a test taking
	// over authCacheTTL failed a "still cached" check); the test of expiry
	// sets its own.
	stopped := time.Now()
	c.now = func() time.Time { return stopped }
	t.Cleanup(c.Close)
	f := &authCacheFixture{t: t, cache: c, dir: dir, store: store, other: other, engine: c.WatchStore(store)}
	f.resolve("warm-up", "") // starts the tail
	f.waitLive()
	return f
}

func (f *authCacheFixture) waitLive() {
	f.t.Helper()
	f.waitUntil("the auth cache's tail started", func(c *AuthCache) bool { return c.live })
}

// waitUntil polls the cache's state, under its lock, until cond holds.
func (f *authCacheFixture) waitUntil(what string, cond func(*AuthCache) bool) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.cache.mu.Lock()
		ok := cond(f.cache)
		f.cache.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("waited 10 s in vain: %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (f *authCacheFixture) resolve(digest, customerID string) (Principal, bool, CustomerRef, bool) {
	f.t.Helper()
	p, ok, c, cok, err := f.cache.Resolve(context.Background(), digest, customerID)
	if err != nil {
		f.t.Fatal(err)
	}
	return p, ok, c, cok
}

// head is the log's current head.
func (f *authCacheFixture) head() eventstore.Position {
	f.t.Helper()
	h, err := f.store.Head(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return h
}

// appendTo appends one event to stream through s and returns its position.
func (f *authCacheFixture) appendTo(s eventstore.Store, stream string) eventstore.Position {
	f.t.Helper()
	res, err := s.Append(context.Background(), eventstore.StreamAppend{Stream: stream, Expected: eventstore.Any,
		Events: []eventstore.EventData{{ID: uuid.New(), Type: "test.changed", Data: []byte(`{}`)}}})
	if err != nil {
		f.t.Fatal(err)
	}
	return res.Position
}

// waitSeen waits until the cache's tail has read pos.
func (f *authCacheFixture) waitSeen(pos eventstore.Position) {
	f.t.Helper()
	f.waitUntil(fmt.Sprintf("the auth cache's tail read %v", pos), func(c *AuthCache) bool { return c.seen.AtLeast(pos) })
}

// expectCalls resolves (digest, customerID) and checks the directory's
// total lookups afterwards.
func (f *authCacheFixture) expectCalls(what, digest, customerID string, want int) {
	f.t.Helper()
	f.resolve(digest, customerID)
	if got := f.dir.count(); got != want {
		f.t.Fatalf("%s: %d directory lookups, want %d", what, got, want)
	}
}

func found(covers eventstore.Position, customer bool) ResolvedAuth {
	r := ResolvedAuth{Principal: Principal{KeyID: "key_1", MerchantID: "mer_1", Environment: domain.Test},
		Found: true, Covers: covers, Covered: true}
	if customer {
		r.Customer, r.CustomerFound = CustomerRef{MerchantID: "mer_1", Environment: domain.Test}, true
	}
	return r
}

func TestAuthCacheAnswersRepeatsFromMemory(t *testing.T) {
	f := newAuthCacheFixture(t)
	f.dir.set(found(f.head(), true))
	base := f.dir.count()
	f.expectCalls("first lookup", "d1", "cus_1", base+1)
	f.expectCalls("repeat", "d1", "cus_1", base+1)
	p, ok, c, cok := f.resolve("d1", "cus_1")
	if !ok || !cok || p.KeyID != "key_1" || c.ID != "cus_1" || c.MerchantID != "mer_1" {
		t.Fatalf("cached answer: %+v %v %+v %v", p, ok, c, cok)
	}
	// Another customer, or the key alone, is another lookup.
	f.expectCalls("other customer", "d1", "cus_2", base+2)
	f.expectCalls("key alone", "d1", "", base+3)
	f.expectCalls("key alone again", "d1", "", base+3)
}

func TestAuthCacheNeverKeepsIncompleteAnswers(t *testing.T) {
	f := newAuthCacheFixture(t)
	base := f.dir.count()
	for i, a := range []ResolvedAuth{
		{}, // unknown key
		{Principal: Principal{KeyID: "k"}, Found: true, Covers: f.head(), Covered: true},     // customer not found
		{Principal: Principal{KeyID: "k"}, Found: true, CustomerFound: true, Covered: false}, // coverage unknown
	} {
		f.dir.set(a)
		f.expectCalls("first", "d", "cus_x", base+2*i+1)
		f.expectCalls("again: not cached", "d", "cus_x", base+2*i+2)
	}
}

func TestAuthCacheDropsWhatEventsChange(t *testing.T) {
	f := newAuthCacheFixture(t)
	f.dir.set(found(f.head(), true))
	f.resolve("d1", "cus_a")
	f.resolve("d1", "cus_b")
	f.resolve("d2", "")
	base := f.dir.count()

	// A customer's event (written by another process) drops that
	// customer's entries only.
	f.waitSeen(f.appendTo(f.other, app.CustomerKind.StreamName("cus_a")))
	f.dir.set(found(f.head(), true))
	f.expectCalls("customer a after its event", "d1", "cus_a", base+1)
	f.expectCalls("customer b", "d1", "cus_b", base+1)
	f.expectCalls("the key alone", "d2", "", base+1)

	// Events of other aggregates change nothing.
	f.waitSeen(f.appendTo(f.other, app.EscrowKind.StreamName(uuid.NewString())))
	f.expectCalls("after an escrow event", "d1", "cus_b", base+1)

	// A merchant's event drops everything.
	f.waitSeen(f.appendTo(f.other, app.MerchantKind.StreamName("mer_1")))
	f.dir.set(found(f.head(), true))
	f.expectCalls("customer b after a merchant event", "d1", "cus_b", base+2)
	f.expectCalls("the key alone after a merchant event", "d2", "", base+3)
}

// TestAuthCacheRefusesAnswersOlderThanAChangeItSaw: the read models can lag
// the tail. An answer covering less than the last change the tail read may
// predate it, so it is used but not kept.
func TestAuthCacheRefusesAnswersOlderThanAChangeItSaw(t *testing.T) {
	f := newAuthCacheFixture(t)
	before := f.head()
	f.waitSeen(f.appendTo(f.other, app.CustomerKind.StreamName("cus_a")))
	f.dir.set(found(before, true)) // read models still short of the change
	base := f.dir.count()
	f.expectCalls("stale answer", "d1", "cus_a", base+1)
	f.expectCalls("stale answer not kept", "d1", "cus_a", base+2)
	// Another customer's answer is refused too: the cache compares with the
	// last change of any merchant or customer.
	f.expectCalls("stale answer, other customer", "d1", "cus_b", base+3)
	f.expectCalls("not kept either", "d1", "cus_b", base+4)
	f.dir.set(found(f.head(), true)) // the read models caught up
	f.expectCalls("current answer", "d1", "cus_a", base+5)
	f.expectCalls("current answer kept", "d1", "cus_a", base+5)
}

// TestAuthCacheOwnWritesCountAtOnce: a change this process wrote (a
// revocation through the API) counts for the next lookup even before the
// tail has read it: nothing is answered from memory until it has.
func TestAuthCacheOwnWritesCountAtOnce(t *testing.T) {
	f := newAuthCacheFixture(t)
	f.dir.set(found(f.head(), true))
	f.resolve("d1", "cus_b")
	base := f.dir.count()
	// Hold the tail back: subscribers see nothing past this open log
	// writer, so the tail cannot read the own write below.
	_, endHold := pgtest.OpenLogWriter(t, f.store.Pool().Config().ConnString())
	pos := f.appendTo(f.engine, app.CustomerKind.StreamName("cus_a"))
	f.expectCalls("unrelated customer while an own change is unread", "d1", "cus_b", base+1)
	endHold()
	f.waitSeen(pos)
	// The answer kept meanwhile is current: the change was another
	// customer's.
	f.expectCalls("after the tail read it", "d1", "cus_b", base+1)
	f.expectCalls("customer a", "d1", "cus_a", base+2)
	// Appends elsewhere than merchants and customers are not watched.
	f.appendTo(f.engine, app.EscrowKind.StreamName(uuid.NewString()))
	f.expectCalls("after an own escrow append", "d1", "cus_b", base+2)
}

func TestAuthCacheEntriesExpire(t *testing.T) {
	f := newAuthCacheFixture(t)
	var mu sync.Mutex
	now := time.Now()
	f.cache.mu.Lock()
	f.cache.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	f.cache.mu.Unlock()
	f.dir.set(found(f.head(), false))
	base := f.dir.count()
	f.expectCalls("first", "d1", "", base+1)
	mu.Lock()
	now = now.Add(authCacheTTL - time.Millisecond)
	mu.Unlock()
	f.expectCalls("within the TTL", "d1", "", base+1)
	mu.Lock()
	now = now.Add(time.Millisecond)
	mu.Unlock()
	f.expectCalls("at the TTL", "d1", "", base+2)
}

func TestAuthCacheIsBounded(t *testing.T) {
	f := newAuthCacheFixture(t)
	f.cache.mu.Lock()
	f.cache.max = 3
	f.cache.mu.Unlock()
	f.dir.set(found(f.head(), true))
	count := func() (customers, entries int) {
		f.cache.mu.Lock()
		defer f.cache.mu.Unlock()
		for _, m := range f.cache.entries {
			entries += len(m)
		}
		return len(f.cache.entries), entries
	}
	for _, c := range []string{"c1", "c2", "c3"} {
		f.resolve("d", c)
	}
	// Another key of a remembered customer takes no more room.
	f.resolve("d2", "c3")
	if c, e := count(); c != 3 || e != 4 {
		t.Fatalf("3 customers, one with two keys: %d customers, %d entries", c, e)
	}
	f.resolve("d", "c4")
	if c, e := count(); c != 1 || e != 1 {
		t.Fatalf("a 4th customer with room for 3: %d customers, %d entries; want the cache started over with 1", c, e)
	}
}

// failingStore is a store whose log cannot be followed.
type failingStore struct{ eventstore.Store }

func (failingStore) Head(context.Context) (eventstore.Position, error) {
	return eventstore.Position{}, errors.New("database unreachable")
}

func TestAuthCacheWithoutTailAsksEveryTime(t *testing.T) {
	dir := &countingDirectory{answer: found(eventstore.Position{}, false)}
	c := NewAuthCache(dir, failingStore{}, nil)
	defer c.Close()
	for i := 1; i <= 3; i++ {
		if _, ok, _, _, err := c.Resolve(context.Background(), "d", ""); err != nil || !ok {
			t.Fatalf("lookup %d: %v %v", i, ok, err)
		}
		if dir.count() != i {
			t.Fatalf("lookup %d without a tail: %d directory lookups", i, dir.count())
		}
	}
}

// droppingStore is a store whose subscription can be cut (cut) and whose
// next Head, the tail's restart, waits for resume: events appended
// meanwhile are never read by the restarted tail.
type droppingStore struct {
	eventstore.Store
	mu     sync.Mutex
	heads  int
	subs   int
	cut    chan struct{} // closed: the first subscription fails
	resume chan struct{} // closed: the second Head (the restart) proceeds
}

func (s *droppingStore) Head(ctx context.Context) (eventstore.Position, error) {
	s.mu.Lock()
	s.heads++
	n := s.heads
	s.mu.Unlock()
	if n > 1 {
		select {
		case <-s.resume:
		case <-ctx.Done():
			return eventstore.Position{}, ctx.Err()
		}
	}
	return s.Store.Head(ctx)
}

func (s *droppingStore) Subscribe(ctx context.Context, after eventstore.Position, handle func(context.Context, []eventstore.RecordedEvent) error) error {
	s.mu.Lock()
	s.subs++
	first := s.subs == 1
	s.mu.Unlock()
	if !first {
		return s.Store.Subscribe(ctx, after, handle)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.cut:
			cancel()
		case <-sctx.Done():
		}
	}()
	err := s.Store.Subscribe(sctx, after, handle)
	if ctx.Err() == nil {
		return errors.New("subscription lost")
	}
	return err
}

// TestAuthCacheForgetsAcrossATailRestart: a tail that fails restarts at
// the log's head, so the events appended while it was down are never read.
// Whatever was cached before is dropped, and answers from read models
// short of that head are not kept: either could predate a missed change
// (here the customer's blocking).
func TestAuthCacheForgetsAcrossATailRestart(t *testing.T) {
	pool := pgtest.NewPool(t)
	store, other := postgres.New(pool), postgres.New(pool)
	t.Cleanup(store.Close)
	t.Cleanup(other.Close)
	ds := &droppingStore{Store: store, cut: make(chan struct{}), resume: make(chan struct{})}
	dir := &countingDirectory{}
	c := NewAuthCache(dir, ds, zap.NewNop())
	t.Cleanup(c.Close)
	f := &authCacheFixture{t: t, cache: c, dir: dir, store: store, other: other}
	f.resolve("warm-up", "")
	f.waitLive()

	before := f.head()
	f.dir.set(found(before, true))
	base := f.dir.count()
	f.expectCalls("first", "d1", "cus_a", base+1)
	f.expectCalls("kept", "d1", "cus_a", base+1)

	close(ds.cut)
	f.waitUntil("the tail failed", func(c *AuthCache) bool { return !c.live })
	missed := f.appendTo(f.other, app.CustomerKind.StreamName("cus_a")) // never read by the cache
	// Restart only once the head includes it (an open transaction anywhere
	// on the server holds the head back), so the restarted tail skips it.
	for deadline := time.Now().Add(10 * time.Second); f.head().Less(missed); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the head never reached %v", missed)
		}
	}
	close(ds.resume)
	f.waitLive()

	f.expectCalls("an entry from before the restart", "d1", "cus_a", base+2)
	// The read models still short of the missed event: used, not kept.
	f.expectCalls("an answer short of the restart's head, not kept", "d1", "cus_a", base+3)
	f.dir.set(found(f.head(), true))
	f.expectCalls("a current answer", "d1", "cus_a", base+4)
	f.expectCalls("kept", "d1", "cus_a", base+4)
}
