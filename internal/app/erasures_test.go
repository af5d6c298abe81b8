package app

import (
	"context"
	"errors"
	"fmt"
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
			FollowErasures(fctx, store, &head, nil, func(cid string, rev uint64) {
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

// failingLog delivers its events one batch per Subscribe, after the
// position asked for, failing every call after its batch: a log read that
// breaks and is taken up again.
type failingLog struct {
	eventstore.Store
	head   eventstore.Position
	events []eventstore.RecordedEvent
	mu     sync.Mutex
	asked  []eventstore.Position
}

func (f *failingLog) Head(context.Context) (eventstore.Position, error) { return f.head, nil }

func (f *failingLog) Subscribe(ctx context.Context, after eventstore.Position, handle func(context.Context, []eventstore.RecordedEvent) error) error {
	f.mu.Lock()
	f.asked = append(f.asked, after)
	f.mu.Unlock()
	for _, e := range f.events {
		if after.Less(e.Position) {
			if err := handle(ctx, []eventstore.RecordedEvent{e}); err != nil {
				return err
			}
			return errors.New("connection reset")
		}
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestFollowErasuresResumesWhereItStopped: the following starts at the
// head, passes over other events, and after a failed read takes the log
// up after the last event it read, so an erasure written meanwhile is
// not missed and none is reported twice.
func TestFollowErasuresResumesWhereItStopped(t *testing.T) {
	at := func(n uint64) eventstore.Position { return eventstore.Position{Commit: n, Prepare: n} }
	log := &failingLog{head: at(1), events: []eventstore.RecordedEvent{
		{Stream: "customer-c_old", Revision: 3, Position: at(1), Type: "customer.erased"}, // before the head
		{Stream: "customer-c_ada", Revision: 4, Position: at(2), Type: "customer.erased"},
		{Stream: "customer-c_bola", Revision: 0, Position: at(3), Type: "customer.created"},
		{Stream: "customer-c_bola", Revision: 7, Position: at(4), Type: "customer.erased"},
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan string, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		FollowErasures(ctx, log, nil, nil, func(id string, rev uint64) { got <- fmt.Sprint(id, "@", rev) })
	}()
	for _, want := range []string{"c_ada@4", "c_bola@7"} {
		select {
		case g := <-got:
			if g != want {
				t.Fatalf("erasure %s, want %s", g, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("erasure %s not reported", want)
		}
	}
	cancel()
	<-done
	if len(got) != 0 {
		t.Fatalf("reported more: %s", <-got)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	// After the head, then after each event read (the last read may not
	// have been taken up again before the end).
	want := []eventstore.Position{at(1), at(2), at(3), at(4)}
	if n := len(log.asked); n < 3 || n > 4 || fmt.Sprint(log.asked) != fmt.Sprint(want[:n]) {
		t.Fatalf("read the log after %v, want %v", log.asked, want)
	}
}
