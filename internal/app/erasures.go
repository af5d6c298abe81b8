package app

import (
	"context"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/eventstore"
)

// erasedType is the stored type of a customer's erasure.
var erasedType = customer.Erased{}.EventType()

// FollowErasures reads the log after position after (nil: from its head
// as the reading starts) and calls erased for every customer erasure
// (customer.erased) in it, with the customer's id and the event's
// revision in their stream, until ctx ends. An erasure is recorded before
// its data key is destroyed, by whichever process runs the command; a
// process that caches keys or customers' states follows the log with it
// to forget them as soon as the record is there, instead of when its
// cached key expires. A failure to read the log is logged and the reading
// resumes after the last event read, so no erasure is missed.
func FollowErasures(ctx context.Context, store eventstore.Store, after *eventstore.Position, log *zap.Logger, erased func(customerID string, rev uint64)) {
	if log == nil {
		log = zap.NewNop()
	}
	if after != nil {
		from := *after // the caller's stays as given
		after = &from
	}
	prefix := CustomerKind.StreamName("")
	backoff := 100 * time.Millisecond
	for {
		var err error
		if after == nil {
			var head eventstore.Position
			if head, err = store.Head(ctx); err == nil {
				after = &head
			}
		}
		if after != nil {
			err = store.Subscribe(ctx, *after, func(_ context.Context, events []eventstore.RecordedEvent) error {
				for _, e := range events {
					if e.Type == erasedType {
						if id, ok := strings.CutPrefix(e.Stream, prefix); ok {
							erased(id, e.Revision)
						}
					}
				}
				if len(events) > 0 {
					*after = events[len(events)-1].Position
				}
				backoff = 100 * time.Millisecond
				return nil
			})
		}
		if ctx.Err() != nil {
			return
		}
		log.Warn("erasures: cannot follow the event log; a customer erased meanwhile is forgotten here when their cached key expires", zap.Error(err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}
