// Following the global log in batches.

package kurrent

import (
	"context"
	"errors"
	"time"

	"github.com/kurrent-io/KurrentDB-Client-Go/kurrentdb"

	"github.com/escrowd/escrowd/eventstore"
)

// Subscribe follows $all from after. A subscription the server drops is
// resumed from the last event handled; it ends only with ctx, with the
// handler's error, or with an error no retry can fix.
func (s *Store) Subscribe(ctx context.Context, after eventstore.Position, handle func(context.Context, []eventstore.RecordedEvent) error) error {
	pos := after
	backoff := 100 * time.Millisecond
	for {
		sub, err := s.client.SubscribeToAll(ctx, kurrentdb.SubscribeToAllOptions{
			From:   allPosition(pos),
			Filter: kurrentdb.ExcludeSystemEventsFilter(),
		})
		if err == nil {
			err = s.follow(ctx, sub, &pos, handle)
			_ = sub.Close()
			if errors.Is(err, errHandler) {
				return errors.Unwrap(err)
			}
			backoff = 100 * time.Millisecond
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if permanent(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// errHandler marks an error of the handler, which Subscribe returns as is.
var errHandler = errors.New("handler failed")

type handlerError struct{ err error }

func (e handlerError) Error() string { return e.err.Error() }

func (e handlerError) Is(target error) bool { return target == errHandler }

func (e handlerError) Unwrap() error { return e.err }

// followBatch bounds the events follow hands over at once.
const followBatch = 500

// follow hands the subscription's events to handle in batches: each batch
// is what arrived while the previous one was handled (at most
// followBatch), so a busy log costs a reader (a projection's transaction)
// one call per batch rather than per event, while a quiet one still gets
// each event at once.
func (s *Store) follow(ctx context.Context, sub *kurrentdb.Subscription, pos *eventstore.Position, handle func(context.Context, []eventstore.RecordedEvent) error) error {
	stop := context.AfterFunc(ctx, func() { _ = sub.Close() })
	defer stop()
	done := make(chan struct{})
	defer close(done)
	arrived := make(chan *kurrentdb.SubscriptionEvent, followBatch)
	go func() {
		for {
			ev := sub.Recv()
			select {
			case arrived <- ev:
			case <-done:
				return
			}
			if ev.SubscriptionDropped != nil {
				return
			}
		}
	}()
	last := *pos
	var batch []eventstore.RecordedEvent
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := handle(ctx, batch); err != nil {
			return handlerError{err}
		}
		*pos = last
		batch = nil // the handler may keep the slice
		return nil
	}
	for {
		var ev *kurrentdb.SubscriptionEvent
		if len(batch) == 0 {
			ev = <-arrived
		} else if len(batch) < followBatch {
			select {
			case ev = <-arrived:
			default:
			}
		}
		if ev == nil {
			if err := flush(); err != nil {
				return err
			}
			continue
		}
		switch {
		case ev.SubscriptionDropped != nil:
			// What arrived before the drop is handed over first.
			if err := flush(); err != nil {
				return err
			}
			if ev.SubscriptionDropped.Error == nil {
				return errors.New("kurrent: subscription dropped")
			}
			return ev.SubscriptionDropped.Error
		case ev.EventAppeared != nil && ev.EventAppeared.Event != nil:
			e := ev.EventAppeared.Event
			p := eventstore.Position{Commit: e.Position.Commit, Prepare: e.Position.Prepare}
			if !last.Less(p) || isSystem(e) {
				continue
			}
			batch = append(batch, toRecorded(e))
			last = p
		}
	}
}

func permanent(err error) bool {
	var kerr *kurrentdb.Error
	if !errors.As(err, &kerr) {
		return false
	}
	switch kerr.Code() {
	case kurrentdb.ErrorCodeUnauthenticated, kurrentdb.ErrorCodeAccessDenied, kurrentdb.ErrorCodeUnsupportedFeature:
		return true
	}
	return false
}
