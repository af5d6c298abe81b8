package inbox

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Handler processes one event. outcome says what it did (the money it
// moved, or why nothing was to move); an error leaves the event pending,
// to be processed again after a backoff. A handler must be safe to run
// twice on one event (a lease that ran out, two processes): the money
// rules it calls move money once whatever runs them.
type Handler func(ctx context.Context, it Item) (outcome string, err error)

// Worker processes the inbox's due events in every process that runs one:
// claims are leases, so workers never take the same event at once; the
// events of a claim are processed side by side, so one whose provider is
// slow to answer does not hold up the others, and one that fails is
// retried with backoff without holding up the ones after it.
type Worker struct {
	Store  Store
	Handle Handler
	Log    *zap.Logger
	// Interval is how often an idle worker looks for due events (default
	// 1 s); Notify wakes it at once.
	Interval time.Duration
	// Lease is how long a claimed event is the worker's (default 1 min).
	Lease time.Duration
	// Batch is how many events a claim takes (default 20), and so how
	// many are processed at once.
	Batch int
	// Backoff is the wait after the attempt-th failure (default
	// Backoff).
	Backoff func(attempt int) time.Duration
	// Retention is how long processed events are kept (default 30 days);
	// Run prunes older ones about hourly.
	Retention time.Duration

	wake chan struct{}
}

// Backoff is the default wait after the attempt-th failure: 5 s doubled
// per attempt up to an hour, drawn between half and all of it so that
// events failing together are not retried together.
func Backoff(attempt int) time.Duration {
	d := 5 * time.Second
	for i := 1; i < attempt && d < time.Hour; i++ {
		d *= 2
	}
	d = min(d, time.Hour)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

func (w *Worker) defaults() {
	if w.Log == nil {
		w.Log = zap.NewNop()
	}
	if w.Interval <= 0 {
		w.Interval = time.Second
	}
	if w.Lease <= 0 {
		w.Lease = time.Minute
	}
	if w.Batch <= 0 {
		w.Batch = 20
	}
	if w.Backoff == nil {
		w.Backoff = Backoff
	}
	if w.Retention <= 0 {
		w.Retention = 30 * 24 * time.Hour
	}
	if w.wake == nil {
		w.wake = make(chan struct{}, 1)
	}
}

// Init fills in the defaults; call it before Run and Notify share w.
func (w *Worker) Init() *Worker { w.defaults(); return w }

// Notify wakes the worker: an event was just kept.
func (w *Worker) Notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Run processes due events until ctx ends.
func (w *Worker) Run(ctx context.Context) error {
	w.defaults()
	t := time.NewTicker(w.Interval)
	defer t.Stop()
	var pruned time.Time
	for {
		if _, err := w.Drain(ctx); err != nil && ctx.Err() == nil {
			w.Log.Warn("inbox: claiming provider events failed", zap.Error(err))
		}
		if time.Since(pruned) >= time.Hour {
			pruned = time.Now()
			if _, err := w.Store.Prune(ctx, w.Retention); err != nil && ctx.Err() == nil {
				w.Log.Warn("inbox: pruning processed provider events failed", zap.Error(err))
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-w.wake:
		}
	}
}

// Drain processes due events until none is left, and returns how many it
// processed (done or retried).
func (w *Worker) Drain(ctx context.Context) (int, error) {
	w.defaults()
	n := 0
	for {
		items, err := w.Store.Claim(ctx, w.Batch, w.Lease)
		if err != nil {
			return n, err
		}
		errs := make([]error, len(items))
		var wg sync.WaitGroup
		for i, it := range items {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = w.process(ctx, it) }()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return n, err
		}
		n += len(items)
		if len(items) < w.Batch {
			return n, nil
		}
	}
}

// process runs the handler on one claimed event and records the result;
// an error is the inbox's own (recording failed): the lease ends and the
// event is claimed again.
func (w *Worker) process(ctx context.Context, it Item) error {
	log := w.Log.With(zap.String("provider", it.Provider), zap.String("environment", string(it.Environment)),
		zap.String("event_id", it.ID), zap.String("event", it.Name), zap.Int("attempt", it.Attempt))
	outcome, err := w.Handle(ctx, it)
	if err != nil {
		next, rerr := w.Store.Retry(ctx, it, err, w.Backoff(it.Attempt))
		log.Warn("inbox: provider event failed; retrying", zap.Error(err), zap.Time("next", next))
		return rerr
	}
	log.Info("inbox: provider event processed", zap.String("outcome", outcome))
	return w.Store.Done(ctx, it, outcome)
}
