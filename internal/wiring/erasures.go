package wiring

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
)

// WatchErasures makes a customer's erasure, recorded by any process (the
// operator's customer forget), count in this one as soon as it reads the
// record: store's keys forget the customer (nothing of theirs opens here
// again, whatever key is cached) and engines drop the customer's cached
// state. It follows the log in the background until stop is called, from
// its head as read before it returns: a process starting holds no cached
// key or state to forget, and it calls this before it serves, so every
// erasure recorded after it could cache a key is read. (A key marked for
// destruction before that is not cached: keyring.PrepareDestroy.) When the
// head cannot be read now, the background reading takes it as it can.
func WatchErasures(store eventstore.Store, log *zap.Logger, engines ...*app.Engine) (stop func()) {
	forget, _ := store.(interface{ ForgetCustomer(id string) })
	// Erasures are found by type and stream, both plain: the events are
	// read as stored, with nothing opened.
	events := store
	if u, ok := store.(interface{ Unwrap() eventstore.Store }); ok {
		events = u.Unwrap()
	}
	ctx, cancel := context.WithCancel(context.Background())
	var from *eventstore.Position
	headCtx, cancelHead := context.WithTimeout(ctx, 10*time.Second)
	if head, err := events.Head(headCtx); err == nil {
		from = &head
	}
	cancelHead()
	done := make(chan struct{})
	go func() {
		defer close(done)
		app.FollowErasures(ctx, events, from, log, func(id string, rev uint64) {
			if forget != nil {
				forget.ForgetCustomer(id)
			}
			for _, e := range engines {
				e.Invalidate(app.CustomerKind.StreamName(id), rev)
			}
		})
	}()
	return func() { cancel(); <-done }
}
