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
// claims are leases, so workers never take the same event at once. Up to
// Concurrency events are processed side by side, and a slot freed by one
// is filled by the next claim at once, so one whose provider is slow to
// answer holds up neither the others of its claim nor the claims after
// it, and one that fails is retried with backoff without holding up the
// ones after it.
type Worker struct {
	Store  Store
	Handle Handler
	Log    *zap.Logger
	// Interval is how often an idle worker looks for due events (default
	// 1 s); Notify wakes it at once.
	Interval time.Duration
	// Lease is how long a claimed event is the worker's (default 1 min).
	Lease time.Duration
	// Batch is the most events a claim takes (default 20).
	Batch int
	// Concurrency is the most events processed at once (default 16).
	// Events of one customer processed together are kept apart by the
	// expected revisions of their appends (the loser decides again), so
	// this bounds the work in flight, not what is safe. More than the
	// database can commit side by side only takes CPU from the hook's
	// answers.
	Concurrency int
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
	if w.Concurrency <= 0 {
		w.Concurrency = 16
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

// Run processes due events until ctx ends, and returns once the events
// in hand are processed.
func (w *Worker) Run(ctx context.Context) error {
	w.defaults()
	t := time.NewTicker(w.Interval)
	defer t.Stop()
	p := w.newPump(ctx)
	defer p.stop()
	var pruned time.Time
	look := true // due events may be waiting
	for {
		if look && p.free() > 0 {
			claimed, asked, err := p.claim()
			if err != nil && ctx.Err() == nil {
				w.Log.Warn("inbox: claiming provider events failed", zap.Error(err))
			}
			look = err == nil && claimed == asked
		}
		if time.Since(pruned) >= time.Hour {
			pruned = time.Now()
			if _, err := w.Store.Prune(ctx, w.Retention); err != nil && ctx.Err() == nil {
				w.Log.Warn("inbox: pruning processed provider events failed", zap.Error(err))
			}
		}
		// A full claim may have left more due: claim again when a slot
		// frees; otherwise wait for an event kept or the interval.
		var freed <-chan struct{}
		if look {
			if p.free() > 0 {
				continue
			}
			freed = p.freed
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			look = true
		case <-w.wake:
			look = true
		case <-freed:
		}
	}
}

// Drain processes due events until none is left, and returns how many it
// processed (done or retried).
func (w *Worker) Drain(ctx context.Context) (int, error) {
	w.defaults()
	p := w.newPump(ctx)
	defer p.stop()
	for {
		claimed, asked, err := p.claim()
		if err != nil {
			p.wait()
			return p.processed(), errors.Join(err, p.err())
		}
		if claimed < asked {
			// None was left due when claimed: once those in hand are
			// processed (a retried one may be due again at once), look
			// again, and stop when nothing more was claimed.
			p.wait()
			if err := p.err(); err != nil {
				return p.processed(), err
			}
			if claimed == 0 {
				return p.processed(), nil
			}
			continue
		}
		if p.free() == 0 {
			<-p.freed
		}
	}
}

// pump processes claimed events in at most the worker's Concurrency
// goroutines.
type pump struct {
	w     *Worker
	ctx   context.Context
	slots chan struct{} // one token per event in hand
	freed chan struct{} // a slot freed (coalesced)
	wg    sync.WaitGroup
	// marks are the events processed, for recordDone; marked is closed
	// when it has ended.
	marks  chan mark
	marked chan struct{}

	mu   sync.Mutex
	n    int
	errs []error
}

// newPump starts a pump; stop it when done with it.
func (w *Worker) newPump(ctx context.Context) *pump {
	p := &pump{w: w, ctx: ctx, slots: make(chan struct{}, w.Concurrency), freed: make(chan struct{}, 1),
		marks: make(chan mark, w.Concurrency), marked: make(chan struct{})}
	go p.recordDone()
	return p
}

// stop waits for the events in hand, then ends the pump's recording.
func (p *pump) stop() {
	p.wait()
	close(p.marks)
	<-p.marked
}

// mark is an event processed, waiting for its record (done).
type mark struct {
	done   Processed
	result chan error
}

// maxMarks bounds the events recorded done by one statement.
const maxMarks = 64

// recordDone records processed events as done, those that finished while
// the statement before ran all in the next: one statement and commit for
// many events when many are in hand, at once for one alone. A statement
// is given its own time limit, not the pump's context: it records work
// already done, which a worker stopping should still keep.
func (p *pump) recordDone() {
	defer close(p.marked)
	for m := range p.marks {
		batch := []mark{m}
	more:
		for len(batch) < maxMarks {
			select {
			case m, ok := <-p.marks:
				if !ok {
					break more
				}
				batch = append(batch, m)
			default:
				break more
			}
		}
		done := make([]Processed, len(batch))
		for i, m := range batch {
			done[i] = m.done
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), markTimeout)
		err := p.w.Store.Done(ctx, done...)
		cancel()
		for _, m := range batch {
			m.result <- err
		}
	}
}

// markTimeout bounds one statement recording events done.
const markTimeout = 30 * time.Second

// markDone records it processed, with outcome, and returns once it is.
func (p *pump) markDone(it Item, outcome string) error {
	m := mark{done: Processed{Item: it, Outcome: outcome}, result: make(chan error, 1)}
	p.marks <- m
	return <-m.result
}

func (p *pump) free() int { return cap(p.slots) - len(p.slots) }

// claim takes as many due events as there are free slots (at most a
// Batch) and starts processing each; it returns how many it claimed of
// how many it asked for.
func (p *pump) claim() (claimed, asked int, err error) {
	asked = min(p.free(), p.w.Batch)
	if asked == 0 {
		return 0, 0, nil
	}
	items, err := p.w.Store.Claim(p.ctx, asked, p.w.Lease)
	if err != nil {
		return 0, asked, err
	}
	for _, it := range items {
		p.slots <- struct{}{}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			err := p.w.process(p.ctx, it, p.markDone)
			p.mu.Lock()
			p.n++
			if err != nil {
				p.errs = append(p.errs, err)
			}
			p.mu.Unlock()
			<-p.slots
			select {
			case p.freed <- struct{}{}:
			default:
			}
		}()
	}
	return len(items), asked, nil
}

// wait returns once every event in hand is processed.
func (p *pump) wait() { p.wg.Wait() }

func (p *pump) processed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// err is what recording outcomes failed with since the last call: those
// events' leases end and they are claimed again.
func (p *pump) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := errors.Join(p.errs...)
	p.errs = nil
	return err
}

// process runs the handler on one claimed event and records the result;
// an error is the inbox's own (recording failed): the lease ends and the
// event is claimed again.
func (w *Worker) process(ctx context.Context, it Item, markDone func(Item, string) error) error {
	log := w.Log.With(zap.String("provider", it.Provider), zap.String("environment", string(it.Environment)),
		zap.String("event_id", it.ID), zap.String("event", it.Name), zap.Int("attempt", it.Attempt))
	outcome, err := w.Handle(ctx, it)
	if err != nil {
		next, rerr := w.Store.Retry(ctx, it, err, w.Backoff(it.Attempt))
		log.Warn("inbox: provider event failed; retrying", zap.Error(err), zap.Time("next", next))
		return rerr
	}
	log.Info("inbox: provider event processed", zap.String("outcome", outcome))
	return markDone(it, outcome)
}
