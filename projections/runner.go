package projections

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/eventstore"
)

const (
	defaultWaitTimeout  = 5 * time.Second
	defaultLockRetry    = time.Second
	defaultPollInterval = 5 * time.Millisecond
	defaultRetryBackoff = 100 * time.Millisecond
	defaultLagLimit     = 20_000
	maxRetryBackoff     = 30 * time.Second
	// catchUpBatch is the batch size of CatchUp.
	catchUpBatch = 1000
	// catchUpStall is how long CatchUp waits for another process's runner
	// without seeing its checkpoint move.
	catchUpStall = 30 * time.Second
)

// Runner keeps projectors up to date. Any number of processes may run a
// Runner over the same database: per projector one of them is active (it
// holds a session advisory lock) and the others stand by, retrying the lock
// every LockRetry. Each batch of events is applied and checkpointed in one
// transaction; see applyBatch for why double application cannot happen even
// when two appliers overlap.
type Runner struct {
	store  eventstore.Store
	pool   *pgxpool.Pool
	log    *zap.Logger
	states []*projState

	// WaitTimeout bounds WaitFor (default 5 s).
	WaitTimeout time.Duration
	// LockRetry is how often a standby tries to become active (default 1 s).
	LockRetry time.Duration
	// PollInterval is how often WaitFor reads the checkpoints of projectors
	// that are active in another process (default 5 ms).
	PollInterval time.Duration
	// LagLimit is where Lag stops counting (default 20,000): a far-behind
	// checkpoint costs a readiness probe no more than a near one, whether
	// the store counts in SQL or pages through the log.
	LagLimit int64
	// RetryBackoff is the first pause after a failing batch; it doubles on
	// every further failure up to 30 s (default 100 ms).
	RetryBackoff time.Duration
	// SkipFlushDelay is how long the end of batches a projector skipped may
	// wait in memory before it is stored (default 10 ms; see follow).
	SkipFlushDelay time.Duration
	// ParkAfter is how many times in a row one event may fail to apply
	// before its projector parks it (default 3).
	ParkAfter int

	skips skipFlusher

	mu       sync.Mutex
	progress chan struct{} // closed and replaced whenever a known checkpoint moves
	pollers  int           // WaitFor calls that need checkpoints of other processes
	polling  bool          // the checkpoint poller goroutine is running
}

// projState is what the runner knows of one projector; guarded by Runner.mu.
type projState struct {
	p         Projector
	pos       eventstore.Position
	known     bool // pos was read or written by this runner
	local     bool // this runner is active for p, so pos is current
	lastErr   string
	lastErrAt time.Time
	parked    *Parked // the event p stopped at, until an operator clears it
}

// NewRunner returns a runner of ps; Run starts it.
func NewRunner(store eventstore.Store, pool *pgxpool.Pool, log *zap.Logger, ps ...Projector) *Runner {
	if log == nil {
		log = zap.NewNop()
	}
	r := &Runner{store: store, pool: pool, log: log, progress: make(chan struct{})}
	r.skips.r = r
	for _, p := range ps {
		r.states = append(r.states, &projState{p: p})
	}
	return r
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Projectors returns the runner's projectors.
func (r *Runner) Projectors() []Projector {
	ps := make([]Projector, len(r.states))
	for i, st := range r.states {
		ps[i] = st.p
	}
	return ps
}

func (r *Runner) names() []string {
	names := make([]string, len(r.states))
	for i, st := range r.states {
		names[i] = st.p.Name()
	}
	return names
}

func checkNames(ps []Projector) error {
	seen := map[string]bool{}
	for _, p := range ps {
		if !validName(p.Name()) {
			return fmt.Errorf("projections: projector name %q: want lower-case letters, digits, '_' or '-', starting with a letter", p.Name())
		}
		if seen[p.Name()] {
			return fmt.Errorf("projections: projector name %q used twice", p.Name())
		}
		seen[p.Name()] = true
	}
	return nil
}

// Run keeps every projector up to date until ctx ends, then releases its
// locks and returns nil. Failures of a batch are logged, shown by Status and
// retried with backoff; they never stop Run.
func (r *Runner) Run(ctx context.Context) error {
	if err := checkNames(r.Projectors()); err != nil {
		return err
	}
	if len(r.states) == 0 {
		<-ctx.Done()
		return nil
	}
	for ctx.Err() == nil {
		err := r.lockSession(ctx)
		if ctx.Err() != nil {
			break
		}
		r.log.Warn("projections: lock connection lost, retrying", zap.Error(err))
		sleep(ctx, orDefault(r.LockRetry, defaultLockRetry))
	}
	return nil
}

// lockSession holds one dedicated connection carrying the advisory locks of
// the projectors this runner is active for, tries to take the others every
// LockRetry, and runs each projector whose lock it holds. It returns when ctx
// ends or the connection fails; the locks go with the connection, so the
// projectors are stopped first.
func (r *Runner) lockSession(ctx context.Context) error {
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		r.mu.Lock()
		for _, st := range r.states {
			st.local = false
		}
		r.broadcastLocked()
		r.mu.Unlock()
		uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ucancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock_all()`); err != nil {
			// An unusable connection must not go back to the pool still
			// holding locks: closing it ends the session and its locks.
			_ = conn.Conn().Close(uctx)
		}
		conn.Release()
	}()
	held := make([]bool, len(r.states))
	tick := time.NewTicker(orDefault(r.LockRetry, defaultLockRetry))
	defer tick.Stop()
	for {
		all := true
		for i, st := range r.states {
			if held[i] {
				continue
			}
			var ok bool
			if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+lockKeySQL+`)`, st.p.Name()).Scan(&ok); err != nil {
				return err
			}
			if !ok {
				all = false
				continue
			}
			held[i] = true
			r.log.Info("projections: active", zap.String("projection", st.p.Name()))
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.runActive(sctx, st)
			}()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if all {
			// Nothing to try: just notice a dead connection.
			if _, err := conn.Exec(ctx, `SELECT 1`); err != nil {
				return err
			}
		}
	}
}

// runActive follows the log for one projector while this runner holds its
// lock, retrying failures with backoff. An event that fails on its own
// ParkAfter times in a row (for a reason other than the connection or the
// server) is parked: the projector stops before it until an operator
// retries or skips it, and waits for that.
func (r *Runner) runActive(ctx context.Context, st *projState) {
	name := st.p.Name()
	backoff := orDefault(r.RetryBackoff, defaultRetryBackoff)
	parkAfter := r.ParkAfter
	if parkAfter <= 0 {
		parkAfter = defaultParkAfter
	}
	var (
		poison  string // the id of the event that failed last, on its own
		strikes int
	)
	for ctx.Err() == nil {
		if !r.waitUnparked(ctx, st) {
			return
		}
		err := r.follow(ctx, st, &backoff)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errResync) {
			r.log.Info("projections: checkpoint moved by another applier, re-syncing", zap.String("projection", name))
			continue
		}
		if err == nil {
			err = errors.New("subscription ended")
		}
		var pe *poisonError
		if errors.As(err, &pe) && !transient(pe.err) {
			if id := pe.event.ID.String(); id == poison {
				strikes++
			} else {
				poison, strikes = id, 1
			}
			if strikes >= parkAfter {
				r.parkEvent(ctx, st, pe)
				poison, strikes = "", 0
				continue
			}
		} else {
			poison, strikes = "", 0
		}
		r.log.Error("projections: batch failed, retrying", zap.String("projection", name),
			zap.Duration("backoff", backoff), zap.Error(err))
		r.mu.Lock()
		st.lastErr, st.lastErrAt = err.Error(), time.Now()
		r.mu.Unlock()
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if rerr := recordError(rctx, r.pool, name, err); rerr != nil && ctx.Err() == nil {
			r.log.Warn("projections: cannot record error", zap.String("projection", name), zap.Error(rerr))
		}
		cancel()
		sleep(ctx, backoff)
		backoff = min(2*backoff, maxRetryBackoff)
	}
}

// follow ensures the schema, loads the checkpoint and applies every batch the
// subscription delivers from it.
//
// A batch that holds nothing for the projector (see Interested) moves its
// position in memory at once, so WaitFor in this process never waits for
// it, but reaches the stored checkpoint only after SkipFlushDelay (or with
// the next applied batch, which stores its own end): under load nearly every
// batch is of no interest to most projectors, and storing each skip was a
// transaction per projector per batch. Nothing is lost by the delay: after a
// crash the projector re-reads events it would skip again.
func (r *Runner) follow(ctx context.Context, st *projState, backoff *time.Duration) error {
	pos, err := prepare(ctx, r.pool, st.p)
	if err != nil {
		return err
	}
	r.advance(st, pos, false)
	cp := &checkpointer{r: r, ctx: ctx, name: st.p.Name(), stored: pos, delay: orDefault(r.SkipFlushDelay, defaultSkipFlushDelay)}
	defer cp.close()
	return r.store.Subscribe(ctx, pos, func(ctx context.Context, events []eventstore.RecordedEvent) error {
		if len(events) == 0 {
			return nil
		}
		cp.mu.Lock()
		defer cp.mu.Unlock()
		if cp.resync {
			return errResync
		}
		last := events[len(events)-1].Position
		if !concerns(st.p, events) {
			cp.skipped(last)
		} else {
			next, err := applyBatch(ctx, r.pool, st.p, cp.stored, events)
			if err != nil && !transient(err) {
				// Find the event: apply the batch one event at a time, up
				// to the one that fails on its own.
				err = r.applyEach(ctx, st, cp, events)
				next = cp.stored
			}
			if err != nil {
				return err
			}
			cp.stored = next
		}
		r.advance(st, last, true)
		*backoff = orDefault(r.RetryBackoff, defaultRetryBackoff)
		return nil
	})
}

// applyEach applies events one at a time, moving cp and st along; the
// first that fails is returned as a poisonError. Called with cp.mu held.
func (r *Runner) applyEach(ctx context.Context, st *projState, cp *checkpointer, events []eventstore.RecordedEvent) error {
	for _, e := range events {
		one := []eventstore.RecordedEvent{e}
		if !concerns(st.p, one) {
			cp.skipped(e.Position)
			r.advance(st, e.Position, false)
			continue
		}
		next, err := applyBatch(ctx, r.pool, st.p, cp.stored, one)
		if err != nil {
			if transient(err) {
				return err
			}
			return &poisonError{event: e, err: err}
		}
		cp.stored = next
		r.advance(st, e.Position, true)
	}
	return nil
}

// parkEvent parks the event of failure for st; waitUnparked then shows it
// to the reads waiting for st, which answer at once.
func (r *Runner) parkEvent(ctx context.Context, st *projState, failure *poisonError) {
	name := st.p.Name()
	r.log.Error("projections: event parked: the projector stops before it until an operator retries or skips it",
		zap.String("projection", name), zap.Stringer("position", failure.event.Position),
		zap.String("event", failure.event.ID.String()), zap.String("type", failure.event.Type), zap.Error(failure.err))
	if err := park(ctx, r.pool, name, failure); err != nil {
		r.log.Warn("projections: cannot record the parked event", zap.String("projection", name), zap.Error(err))
	}
}

// waitUnparked loads st's parked event and, while there is one, shows it
// to WaitFor and polls every LockRetry for an operator to clear it. It
// reports whether ctx is still live.
func (r *Runner) waitUnparked(ctx context.Context, st *projState) bool {
	for {
		parked, err := loadParked(ctx, r.pool, []string{st.p.Name()})
		if err == nil {
			pk := parked[st.p.Name()]
			r.mu.Lock()
			changed := (pk == nil) != (st.parked == nil)
			st.parked = pk
			if changed {
				r.broadcastLocked()
			}
			r.mu.Unlock()
			if pk == nil {
				return ctx.Err() == nil
			}
		}
		if !sleep(ctx, orDefault(r.LockRetry, defaultLockRetry)) {
			return false
		}
	}
}

// sleep waits for d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
