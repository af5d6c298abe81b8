// The read fence: WaitFor holds a read until the read models have caught up
// with a write.

package projections

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/escrowd/escrowd/eventstore"
)

// ErrLagging is returned by WaitFor (and CatchUp when another process is
// projecting) when a read model did not reach the wanted position in time.
// Serving the read model then would return stale data: the HTTP layer maps
// it to 503.
var ErrLagging = errors.New("projections: read model is lagging behind the event log")

// advance records a checkpoint this runner read or wrote as active applier.
func (r *Runner) advance(st *projState, pos eventstore.Position, applied bool) {
	r.mu.Lock()
	st.pos, st.known, st.local = pos, true, true
	if applied {
		st.lastErr, st.lastErrAt = "", time.Time{}
	}
	r.broadcastLocked()
	r.mu.Unlock()
}

func (r *Runner) broadcastLocked() {
	close(r.progress)
	r.progress = make(chan struct{})
}

// WaitFor blocks until the checkpoints of the named projectors (every
// projector when none is named) are at or after pos, so that a read of
// their read models after a write sees the write; the others are not waited
// for. Progress of projectors active in this process is signalled in
// memory; for those active elsewhere the checkpoints are polled every
// PollInterval by one goroutine shared by all waiters. After WaitTimeout it
// returns an error wrapping ErrLagging; at once a *ParkedError when a named
// projector behind pos has parked an event. The zero position returns at
// once.
func (r *Runner) WaitFor(ctx context.Context, pos eventstore.Position, names ...string) error {
	if pos == eventstore.Start {
		return nil
	}
	timer := time.NewTimer(orDefault(r.WaitTimeout, defaultWaitTimeout))
	defer timer.Stop()
	polling := false
	defer func() {
		if polling {
			r.mu.Lock()
			r.pollers--
			r.mu.Unlock()
		}
	}()
	for {
		r.mu.Lock()
		var behind *projState
		needPoll := false
		for _, st := range r.states {
			if len(names) > 0 && !slices.Contains(names, st.p.Name()) {
				continue
			}
			if !st.known || st.pos.Less(pos) {
				if st.parked != nil {
					err := &ParkedError{Projector: st.p.Name(), Parked: *st.parked}
					r.mu.Unlock()
					return err
				}
				behind = st
				if !st.local {
					needPoll = true
				}
			}
		}
		if behind == nil {
			r.mu.Unlock()
			return nil
		}
		if needPoll && !polling {
			polling = true
			r.pollers++
			if !r.polling {
				r.polling = true
				go r.pollCheckpoints()
			}
		}
		ch := r.progress
		name, at := behind.p.Name(), behind.pos
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return fmt.Errorf("%w: %s is at %s, waiting for %s", ErrLagging, name, at, pos)
		}
	}
}

// pollCheckpoints reads the stored checkpoints of projectors not active in
// this process while some WaitFor needs them.
func (r *Runner) pollCheckpoints() {
	names := r.names()
	interval := orDefault(r.PollInterval, defaultPollInterval)
	for {
		r.mu.Lock()
		if r.pollers == 0 {
			r.polling = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		cps, err := loadCheckpoints(ctx, r.pool, names)
		var parked map[string]*Parked
		if err == nil {
			parked, err = loadParked(ctx, r.pool, names)
		}
		cancel()
		if err == nil {
			r.mu.Lock()
			changed := false
			for _, st := range r.states {
				if st.local {
					continue
				}
				if pos, ok := cps[st.p.Name()]; ok && (!st.known || pos != st.pos) {
					st.pos, st.known, changed = pos, true, true
				}
				if pk := parked[st.p.Name()]; (pk == nil) != (st.parked == nil) {
					st.parked, changed = pk, true
				}
			}
			if changed {
				r.broadcastLocked()
			}
			r.mu.Unlock()
		}
		time.Sleep(interval)
	}
}
