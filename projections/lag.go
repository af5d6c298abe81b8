// How far the read models are behind the log, for readiness and status.

package projections

import (
	"context"
	"time"

	"github.com/escrowd/escrowd/eventstore"
)

// Horizon reports the events the store holds back behind an open
// transaction (see eventstore.Horizon); has is false for a store without
// such a horizon. A held event is behind every projector at once, which
// their lags cannot show: it lies beyond the head they count up to.
func (r *Runner) Horizon(ctx context.Context, limit int64, explainAfter time.Duration) (h eventstore.Horizon, has bool, err error) {
	hr, has := r.store.(eventstore.HorizonReporter)
	if !has {
		return eventstore.Horizon{}, false, nil
	}
	h, err = hr.Horizon(ctx, limit, explainAfter)
	return h, true, err
}

// Lag is the largest number of events any projector still has to apply up to
// the current head, for readiness checks. It is cheap: one head query, one
// checkpoint query for projectors active elsewhere, and one count of the
// events behind the furthest-behind checkpoint, which stops at LagLimit
// (see EventCounter; a store without it pages through the log).
func (r *Runner) Lag(ctx context.Context) (int64, error) {
	lag, _, err := r.Lags(ctx, 0, 0)
	return lag, err
}

// Lags is Lag, plus the lag of other stored checkpoints against the same
// head: projectors that another runner keeps, such as the webhook
// subscriber. Their checkpoints are read in the same checkpoint query; each
// costs one count more. A name without a stored checkpoint is missing from
// the map. The projectors' lag is counted up to limit and the others' up to
// othersLimit, or LagLimit where that is higher: a caller comparing a lag
// with a threshold passes one past it, so the count can exceed the
// threshold whatever the runner's default.
func (r *Runner) Lags(ctx context.Context, limit, othersLimit int64, others ...string) (int64, map[string]int64, error) {
	head, err := r.store.Head(ctx)
	if err != nil {
		return 0, nil, err
	}
	// A projector that parked an event is left out: it is stopped on
	// purpose, its reads answer 503 naming it, and counting its lag would
	// take every instance out of service for one read model.
	parked, err := loadParked(ctx, r.pool, r.names())
	if err != nil {
		return 0, nil, err
	}
	var (
		positions []eventstore.Position
		remote    []string
	)
	r.mu.Lock()
	for _, st := range r.states {
		if parked[st.p.Name()] != nil {
			continue
		}
		if !st.local {
			remote = append(remote, st.p.Name())
		}
	}
	r.mu.Unlock()
	remote = append(remote, others...)
	var cps map[string]eventstore.Position
	if len(remote) > 0 {
		if cps, err = loadCheckpoints(ctx, r.pool, remote); err != nil {
			return 0, nil, err
		}
	}
	r.mu.Lock()
	for _, st := range r.states {
		if parked[st.p.Name()] != nil {
			continue
		}
		pos := st.pos
		if cp, ok := cps[st.p.Name()]; ok && !st.local {
			pos = cp
		}
		positions = append(positions, pos)
	}
	r.mu.Unlock()
	def := r.LagLimit
	if def <= 0 {
		def = defaultLagLimit
	}
	limit, othersLimit = max(limit, def), max(othersLimit, def)
	// The events behind the earliest checkpoint include those behind every
	// other one: counting them once gives the largest lag.
	var worst int64
	if len(positions) > 0 {
		earliest := positions[0]
		for _, pos := range positions[1:] {
			if pos.Less(earliest) {
				earliest = pos
			}
		}
		if worst, err = countEvents(ctx, r.store, earliest, head, limit); err != nil {
			return 0, nil, err
		}
	}
	lags := make(map[string]int64, len(others))
	for _, name := range others {
		pos, ok := cps[name]
		if !ok {
			continue
		}
		if lags[name], err = countEvents(ctx, r.store, pos, head, othersLimit); err != nil {
			return 0, nil, err
		}
	}
	return worst, lags, nil
}

// Status reports every projector of the runner (see Status); the last error
// comes from this runner's memory when it is active for the projector.
func (r *Runner) Status(ctx context.Context) ([]ProjectorStatus, error) {
	out, err := Status(ctx, r.pool, r.store, r.Projectors()...)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, st := range r.states {
		if st.local && st.lastErr != "" {
			at := st.lastErrAt
			out[i].LastError, out[i].LastErrorAt = st.lastErr, &at
		}
	}
	return out, nil
}

// Parked reports the projectors that parked an event, from any process.
func (r *Runner) Parked(ctx context.Context) (map[string]*Parked, error) {
	return loadParked(ctx, r.pool, r.names())
}
