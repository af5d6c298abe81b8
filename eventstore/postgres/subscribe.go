// Following the global log: LISTEN for appends, one broadcaster for every
// subscriber of the process.

package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/escrowd/escrowd/eventstore"
)

// Subscribe catches up from after, then follows. Near the end of the log it
// takes events from the store's shared tail (one query per wake-up for all
// subscribers); further back it reads the database in batches.
func (s *Store) Subscribe(ctx context.Context, after eventstore.Position, handle func(context.Context, []eventstore.RecordedEvent) error) error {
	const batch = 500
	s.tail.ensure(ctx, s.bg)
	pos := after
	for {
		gen := s.tail.moved.generation()
		events, inWindow := s.tail.since(pos, batch)
		if !inWindow {
			var err error
			if events, err = s.ReadAll(ctx, pos, batch); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return err
			}
		}
		if len(events) > 0 {
			if err := handle(ctx, events); err != nil {
				return err
			}
			pos = events[len(events)-1].Position
			continue
		}
		// Nothing new: wait for the tail to move (it is woken by appends);
		// the timeout covers a tail that is not running.
		if _, err := s.tail.moved.wait(ctx, gen, s.PollInterval); err != nil {
			return err
		}
		s.tail.ensure(ctx, s.bg)
	}
}

// listen holds one connection LISTENing for appends of other processes.
func (s *Store) listen(ctx context.Context) {
	for ctx.Err() == nil {
		err := func() error {
			conn, err := s.pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
				return err
			}
			defer conn.Exec(context.Background(), "UNLISTEN "+notifyChannel) //nolint:errcheck
			for {
				n, err := conn.Conn().WaitForNotification(ctx)
				if err != nil {
					return err
				}
				if n.Payload == s.self {
					// This store's own append, which woke its subscribers
					// when it returned: waking them again would only cost
					// each another read of the log.
					continue
				}
				s.wake.broadcast()
			}
		}()
		if err != nil && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// sendNotifications tells other processes about appends, coalescing bursts
// into one NOTIFY so that notification never throttles writers.
//
// Close does not cut a notification short, and sends a pending one: a
// process that appends and exits at once (an operator command revoking a
// key) must still wake the other processes' subscribers, or they would see
// its events only at their next poll.
func (s *Store) sendNotifications(ctx context.Context) {
	notify := func() {
		nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = s.pool.Exec(nctx, `SELECT pg_notify($1, $2)`, notifyChannel, s.self)
	}
	for {
		select {
		case <-ctx.Done():
			select {
			case <-s.notifyCh:
				notify()
			default:
			}
			return
		case <-s.notifyCh:
			notify()
		}
	}
}

// broadcaster wakes every waiter at once: waiters hold the channel of the
// generation they saw and broadcast closes it.
type broadcaster struct {
	mu  sync.Mutex
	gen uint64
	ch  chan struct{}
}

func newBroadcaster() *broadcaster { return &broadcaster{ch: make(chan struct{})} }

func (b *broadcaster) generation() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.gen
}

func (b *broadcaster) broadcast() {
	b.mu.Lock()
	close(b.ch)
	b.ch = make(chan struct{})
	b.gen++
	b.mu.Unlock()
}

// wait returns true when a broadcast happened after generation gen, false
// on timeout.
func (b *broadcaster) wait(ctx context.Context, gen uint64, timeout time.Duration) (bool, error) {
	b.mu.Lock()
	if b.gen != gen {
		b.mu.Unlock()
		return true, nil
	}
	ch := b.ch
	b.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-ch:
		return true, nil
	case <-t.C:
		return false, nil
	}
}
