package httpapi

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
)

// TestQueriesDirectoryResolveAtCoversItsWrites: the read models' answer
// to the auth cache is the key and customer plus the log position it
// covers, which, once the projectors have caught up, includes the writes
// that made it. Were Covered or Covers lost on the way to the cache, it would
// keep nothing and every request would query again, and its own tests
// (on a stand-in directory) would not notice.
func TestQueriesDirectoryResolveAtCoversItsWrites(t *testing.T) {
	h := newHarness(t)
	cid := h.createCustomer(h.sa(), "dir@x.com", "08035557301")
	ctx := context.Background()
	written, err := h.store.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir := QueriesDirectory{Q: h.api.queries}
	digest := KeyDigest(h.std())
	for _, c := range []string{cid, ""} {
		first, err := dir.ResolveAt(ctx, digest, c)
		p, found, ref, refFound := first.Principal, first.Found, first.Customer, first.CustomerFound
		if err != nil || !found || refFound != (c != "") {
			t.Fatalf("ResolveAt(%q): found %v, customer found %v (%v)", c, found, refFound, err)
		}
		if p.MerchantID != h.m.MerchantID || p.Environment != domain.Test || p.Role != merchant.Standard {
			t.Fatalf("ResolveAt(%q): principal %+v", c, p)
		}
		if c != "" && (ref.ID != cid || ref.MerchantID != h.m.MerchantID || ref.Environment != domain.Test || ref.Blocked) {
			t.Fatalf("ResolveAt(%q): customer %+v", c, ref)
		}
		// A projector that skips an event may store its checkpoint past it
		// a little later: wait for the answer to cover the writes.
		deadline := time.Now().Add(10 * time.Second)
		for {
			r, err := dir.ResolveAt(ctx, digest, c)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r.Principal, p) || !r.Found || r.CustomerFound != refFound || r.Customer != ref {
				t.Fatalf("ResolveAt(%q) = %+v, then %+v %+v", c, r, p, ref)
			}
			if r.Covered && r.Covers.AtLeast(written) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("ResolveAt(%q) covers %v (covered %v), never the writes up to %v", c, r.Covers, r.Covered, written)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if r, err := dir.ResolveAt(ctx, KeyDigest(h.std()+"0"), cid); err != nil || r.Found || r.CustomerFound || r.Covered {
		t.Fatalf("ResolveAt of an unknown key = %+v (%v), want nothing found", r, err)
	}
}

// TestStackWatchesItsOwnAuthChanges: the server's own merchant and
// customer appends are reported to its auth cache, so that no answer is
// taken from memory until the cache's tail has read them (see AuthCache).
// The end-to-end revocation test passes without it whenever the tail reads
// the revocation before the next request, which it nearly always does.
func TestStackWatchesItsOwnAuthChanges(t *testing.T) {
	h := newHarness(t)
	cache, ok := h.api.dir.(*AuthCache)
	if !ok {
		t.Fatalf("the stack's directory is a %T, not the auth cache", h.api.dir)
	}
	pos, err := h.svc.UpdateMerchant(context.Background(), h.m.MerchantID, func(merchant.State) ([]domain.Event, error) {
		return []domain.Event{merchant.AllowlistSet{Entries: []string{"10.9.8.7"}}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cache.mu.Lock()
	mustSee := cache.mustSee
	cache.mu.Unlock()
	if mustSee.Less(pos) {
		t.Fatalf("after the server's own merchant change at %v, its auth cache waits for %v", pos, mustSee)
	}
}
