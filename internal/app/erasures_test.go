package app

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/eventstore"
)

// TestErasureByAnotherInstanceDropsTheCachedCustomer: instance a holds a
// customer's state in its cache; instance b (the operator's command)
// records their erasure. Following the log, a drops the cached state at
// once, and a read of a's (which a stale cache answers without the store)
// then holds nothing personal. A load that read the stream before the
// erasure cannot put its stale state back.
func TestErasureByAnotherInstanceDropsTheCachedCustomer(t *testing.T) {
	onBothStores(t, func(t *testing.T, a, b *Service, store eventstore.Store, actor Actor) {
		ctx := context.Background()
		id, _, err := a.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "Ada", Lastname: "Obi", Email: "ada@x.co", Phone: "08031234567"})
		if err != nil {
			t.Fatal(err)
		}
		stream := CustomerKind.StreamName(id)
		if c, err := Peek(ctx, a.Engine, CustomerKind, id); err != nil || c.Email != "ada@x.co" {
			t.Fatalf("cached: %+v %v", c, err)
		}
		head, err := store.Head(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		seen := make(chan uint64, 1)
		go func() {
			defer wg.Done()
			FollowErasures(fctx, store, head, nil, func(cid string, rev uint64) {
				if cid == id {
					a.Engine.Invalidate(stream, rev)
					seen <- rev
				}
			})
		}()
		t.Cleanup(func() { cancel(); wg.Wait() })
		if _, err := b.RecordErasure(ctx, actor, id); err != nil {
			t.Fatal(err)
		}
		var rev uint64
		select {
		case rev = <-seen:
		case <-time.After(10 * time.Second):
			t.Fatal("the erasure was not read from the log")
		}
		c, err := Peek(ctx, a.Engine, CustomerKind, id)
		if err != nil || !c.Erased || c.Email != domain.Erased || c.Firstname != domain.Erased || c.Phone != domain.Erased {
			t.Fatalf("after the erasure a reads %+v %v", c, err)
		}
		// A state folded before the erasure, arriving late (say, after the
		// cache let the erased state go), is not kept.
		a.Engine.cache.evict(stream)
		a.Engine.cache.put(cached{stream: stream, state: customer.State{ID: id, Email: "ada@x.co"}, rev: int64(rev) - 1})
		if hit, ok := a.Engine.cache.get(stream); ok {
			t.Fatalf("a stale state was cached again: %+v", hit)
		}
		// Their email and phone were released in the erasure's append.
		if _, _, err := a.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "Ada", Lastname: "Obi", Email: "ada@x.co", Phone: "08031234567"}); err != nil {
			t.Fatalf("registering the erased customer's email and phone again: %v", err)
		}
	})
}
