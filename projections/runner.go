package projections

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/eventstore"
)

// ErrLagging is returned by WaitFor (and CatchUp when another process is
// projecting) when a read model did not reach the wanted position in time.
// Serving the read model then would return stale data: the HTTP layer maps
// it to 503.
var ErrLagging = errors.New("projections: read model is lagging behind the event log")

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
// lock, retrying failures with backoff.
func (r *Runner) runActive(ctx context.Context, st *projState) {
	name := st.p.Name()
	backoff := orDefault(r.RetryBackoff, defaultRetryBackoff)
	for ctx.Err() == nil {
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

// defaultSkipFlushDelay is how long a skipped batch's end may wait in
// memory before it is stored (see follow). It bounds how far a waiter in
// another process, which polls stored checkpoints, can be held up by batches
// the projector had nothing to do with.
const defaultSkipFlushDelay = 10 * time.Millisecond

// checkpointer stores the checkpoint of one following projector: applied
// batches store theirs in their own transaction; skipped ones are stored
// by the runner's skipFlusher, at most delay after the first skip not yet
// stored. mu serialises the two.
type checkpointer struct {
	r     *Runner
	ctx   context.Context
	name  string
	delay time.Duration

	mu     sync.Mutex
	stored eventstore.Position // the checkpoint as stored
	target eventstore.Position // where the skipped batches end
	armed  bool                // due at the flusher
	resync bool                // the stored checkpoint moved under us (a rebuild)
	closed bool
}

// pending reports whether skipped batches end past the stored checkpoint;
// mu held. It is derived, never kept: an applied batch stores its own end,
// which covers every skip before it.
func (c *checkpointer) pending() bool { return c.stored.Less(c.target) }

// skipped records that every event up to last is of no interest; mu held.
// The delay runs from the first skip not yet stored and is not pushed back
// by later ones: under a steady stream of skips the position is still
// stored every delay, not only once the stream pauses.
func (c *checkpointer) skipped(last eventstore.Position) {
	c.target = last
	if c.armed {
		return
	}
	c.armed = true
	c.r.skips.due(c)
}

// store writes target if it is ahead of what is stored (an applied batch
// may have stored past it); mu held. A checkpoint only moves forward.
func (c *checkpointer) store(ctx context.Context) {
	if !c.pending() {
		return
	}
	err := skipBatch(ctx, c.r.pool, c.name, c.stored, c.target)
	switch {
	case err == nil:
		c.stored = c.target
	case errors.Is(err, errResync):
		c.resync = true // the next batch makes follow start over
	case ctx.Err() == nil:
		// Kept pending: the next skip or applied batch stores it.
		c.r.log.Warn("projections: cannot store checkpoint", zap.String("projection", c.name), zap.Error(err))
	}
}

// close stores a pending position (briefly, even though the follow context
// may be over) and leaves the flusher.
func (c *checkpointer) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c.store(ctx)
}

// skipFlusher stores the skipped positions of all of a runner's following
// projectors together, in one statement per delay. Under load nearly every
// batch is skipped by most projectors, and each storing its own took a
// round trip per projector per delay: in the escrow lifecycle benchmark
// about one round trip per lifecycle, a tenth of them (docs/performance.md,
// session 9).
type skipFlusher struct {
	r *Runner

	mu    sync.Mutex
	set   map[*checkpointer]struct{}
	armed bool
}

// due adds c to the next flush, arming it for c.delay from now if it is not
// armed yet. The caller holds c.mu and has set c.armed, or (flush putting
// back one it could not lock) leaves c.armed set as it found it; flush
// never waits for a checkpointer's mu, so the lock order is a
// checkpointer's mu, then the flusher's.
func (f *skipFlusher) due(c *checkpointer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.set == nil {
		f.set = map[*checkpointer]struct{}{}
	}
	f.set[c] = struct{}{}
	if !f.armed {
		f.armed = true
		time.AfterFunc(c.delay, f.flush)
	}
}

// flush stores every due checkpointer's skipped position. It holds the
// locks of those it stores across the statement, as a checkpointer's own
// store did: the statement's expected positions must be the ones stored
// when it commits, and an applied batch moving one meanwhile would look
// like a rebuild. It only tries those locks: a checkpointer whose lock is
// taken is applying a batch (which stores its own end, covering the skips)
// or recording a skip, and waiting for it, possibly for as long as a
// rebuild's swap holds its row, would hold up every other projector, each
// one's next batch waiting for the lock the flush keeps. It is put back
// for the next round instead.
func (f *skipFlusher) flush() {
	f.mu.Lock()
	cs := make([]*checkpointer, 0, len(f.set))
	for c := range f.set {
		cs = append(cs, c)
	}
	clear(f.set)
	f.armed = false
	f.mu.Unlock()
	var batch []*checkpointer
	defer func() {
		for _, c := range batch {
			c.mu.Unlock()
		}
	}()
	for _, c := range cs {
		if !c.mu.TryLock() {
			f.due(c) // c.armed stays set: it is due
			continue
		}
		c.armed = false
		if !c.closed && c.ctx.Err() == nil && !c.resync && c.pending() {
			batch = append(batch, c)
		} else {
			c.mu.Unlock()
		}
	}
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	moved, err := skipBatches(ctx, f.r.pool, batch)
	for _, c := range batch {
		switch m, tried := moved[c.name]; {
		case err == nil && m:
			c.stored = c.target
		case err == nil && tried:
			c.resync = true // the next batch makes follow start over
		default:
			// Not stored (the statement failed, or another transaction held
			// the row): try again after the delay, not only at the next
			// skip, so that an idle projector's stored checkpoint, which
			// other processes read for its lag, catches up.
			if err != nil && c.ctx.Err() == nil {
				c.r.log.Warn("projections: cannot store checkpoint", zap.String("projection", c.name), zap.Error(err))
			}
			c.armed = true
			f.due(c)
		}
	}
}

// skipBatches moves the checkpoints of cs (mu held) from stored to target,
// each only if it is still at stored, in one round trip. It reports, by
// name, whether each checkpoint was moved: false for one found elsewhere
// (errResync for it), absent for one whose row another transaction holds
// (a rebuild's swap, an overlapping applier), which is skipped rather than
// waited for, since the statement holds every other projector's flush.
func skipBatches(ctx context.Context, pool *pgxpool.Pool, cs []*checkpointer) (map[string]bool, error) {
	moves := make([]checkpointMove, len(cs))
	for i, c := range cs {
		moves[i] = checkpointMove{name: c.name, expected: c.stored, next: c.target}
	}
	return moveCheckpoints(ctx, pool, moves, true)
}

// skipBatch moves one checkpoint past a batch that holds nothing for the
// projector, waiting for its row if another transaction holds it: the
// move only happens if the stored checkpoint is still the expected one
// (else errResync, as in applyBatch).
func skipBatch(ctx context.Context, pool *pgxpool.Pool, name string, expected, last eventstore.Position) error {
	moved, err := moveCheckpoints(ctx, pool, []checkpointMove{{name: name, expected: expected, next: last}}, false)
	if err != nil {
		return err
	}
	if !moved[name] {
		return errResync
	}
	return nil
}

// checkpointMove moves a checkpoint from expected to next.
type checkpointMove struct {
	name           string
	expected, next eventstore.Position
}

// moveCheckpoints makes the moves in one round trip, each only if its
// checkpoint is still at expected, taking the rows in name order. It
// reports, by name, whether each checkpoint was moved (false: found
// elsewhere). With skipLocked a row another transaction holds is left out
// of the answer instead of waited for. Like every projection commit it
// need not wait for the WAL flush.
func moveCheckpoints(ctx context.Context, pool *pgxpool.Pool, moves []checkpointMove, skipLocked bool) (map[string]bool, error) {
	n := len(moves)
	names := make([]string, n)
	nc, np, ec, ep := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for i, m := range moves {
		names[i] = m.name
		nc[i], np[i] = toDB(m.next.Commit), toDB(m.next.Prepare)
		ec[i], ep[i] = toDB(m.expected.Commit), toDB(m.expected.Prepare)
	}
	lock := "FOR UPDATE"
	if skipLocked {
		lock = "FOR UPDATE SKIP LOCKED"
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('synchronous_commit', 'off', true)`)
	b.Queue(`WITH x AS (
		  SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[])
		    AS x(name, next_commit, next_prepare, commit_pos, prepare_pos)),
		locked AS (
		  SELECT c.name, c.commit_pos, c.prepare_pos FROM projection_checkpoints c
		   WHERE c.name = ANY ($1) ORDER BY c.name `+lock+`),
		moved AS (
		  UPDATE projection_checkpoints c
		     SET commit_pos = x.next_commit, prepare_pos = x.next_prepare, updated_at = now(),
		         last_error = NULL, last_error_at = NULL
		    FROM x, locked l
		   WHERE c.name = x.name AND l.name = x.name
		     AND c.commit_pos = x.commit_pos AND c.prepare_pos = x.prepare_pos
		  RETURNING c.name)
		SELECT l.name, EXISTS (SELECT 1 FROM moved m WHERE m.name = l.name) FROM locked l`,
		names, nc, np, ec, ep)
	br := pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, n)
	for rows.Next() {
		var (
			name string
			ok   bool
		)
		if err := rows.Scan(&name, &ok); err != nil {
			rows.Close()
			return nil, err
		}
		out[name] = ok
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, br.Close()
}

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

// WaitFor blocks until every projector's checkpoint is at or after pos, so
// that a read after a write sees the write. Progress of projectors active in
// this process is signalled in memory; for those active elsewhere the
// checkpoints are polled every PollInterval by one goroutine shared by all
// waiters. After WaitTimeout it returns an error wrapping ErrLagging. The
// zero position returns at once.
func (r *Runner) WaitFor(ctx context.Context, pos eventstore.Position) error {
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
			if !st.known || st.pos.Less(pos) {
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
			}
			if changed {
				r.broadcastLocked()
			}
			r.mu.Unlock()
		}
		time.Sleep(interval)
	}
}

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
	positions := make([]eventstore.Position, len(r.states))
	var remote []string
	r.mu.Lock()
	for i, st := range r.states {
		positions[i] = st.pos
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
		r.mu.Lock()
		for i, st := range r.states {
			if pos, ok := cps[st.p.Name()]; ok && !st.local {
				positions[i] = pos
			}
		}
		r.mu.Unlock()
	}
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

// CatchUp applies every projector once up to the log's head as of the call,
// then returns; operator commands use it when no server runs. It is safe
// while Runners run the same projectors: when another session holds a
// projector's lock, CatchUp waits for that session's checkpoint to reach the
// head instead, failing with ErrLagging if it stops moving for 30 s.
func CatchUp(ctx context.Context, store eventstore.Store, pool *pgxpool.Pool, log *zap.Logger, ps ...Projector) error {
	return CatchUpTo(ctx, store, pool, log, eventstore.Start, ps...)
}

// CatchUpTo is CatchUp up to at least position at (a write's own position):
// the log's head as of the call can still be short of a write that has just
// committed, because an event becomes readable only when every older write
// transaction has ended.
func CatchUpTo(ctx context.Context, store eventstore.Store, pool *pgxpool.Pool, log *zap.Logger, at eventstore.Position, ps ...Projector) error {
	if log == nil {
		log = zap.NewNop()
	}
	if err := checkNames(ps); err != nil {
		return err
	}
	for _, p := range ps {
		if err := catchUpOne(ctx, store, pool, log, p, at); err != nil {
			return fmt.Errorf("projection %s: %w", p.Name(), err)
		}
	}
	return nil
}

func catchUpOne(ctx context.Context, store eventstore.Store, pool *pgxpool.Pool, log *zap.Logger, p Projector, at eventstore.Position) error {
	head, err := store.Head(ctx)
	if err != nil {
		return err
	}
	if head.Less(at) {
		head = at
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+lockKeySQL+`)`, p.Name()).Scan(&locked); err != nil {
		conn.Release()
		return err
	}
	if !locked {
		conn.Release()
		log.Info("projections: active elsewhere, waiting for it to reach head",
			zap.String("projection", p.Name()), zap.Stringer("head", head))
		return waitForCheckpoint(ctx, pool, p.Name(), head, catchUpStall)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock(`+lockKeySQL+`)`, p.Name()); err != nil {
			_ = conn.Conn().Close(uctx)
		}
		conn.Release()
	}()
	pos, err := applyUpTo(ctx, store, pool, p, head, catchUpBatch)
	if err != nil {
		return err
	}
	log.Info("projections: caught up", zap.String("projection", p.Name()), zap.Stringer("checkpoint", pos))
	return nil
}

// waitForCheckpoint polls name's checkpoint until it is at or after target;
// it gives up with ErrLagging when the checkpoint does not move for stall.
func waitForCheckpoint(ctx context.Context, pool *pgxpool.Pool, name string, target eventstore.Position, stall time.Duration) error {
	var last eventstore.Position
	lastMove := time.Now()
	for {
		cps, err := loadCheckpoints(ctx, pool, []string{name})
		if err != nil {
			return err
		}
		pos := cps[name]
		if pos.AtLeast(target) {
			return nil
		}
		if pos != last {
			last, lastMove = pos, time.Now()
		} else if time.Since(lastMove) > stall {
			return fmt.Errorf("%w: %s stuck at %s, waiting for %s", ErrLagging, name, pos, target)
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return ctx.Err()
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

// Checkpoints live in projection_checkpoints (migrations/0002). Every batch
// locks its projector's row FOR UPDATE before writing, so whoever applies
// events (the active runner, a standby that just took over, an operator's
// catch-up, a rebuild's swap) is serialised on that row, and each of them
// skips what the stored checkpoint already covers.

// errResync tells a reader that the stored checkpoint is not where it
// expected (someone else moved it): it must restart reading from the stored
// checkpoint. Nothing of the batch was written.
var errResync = errors.New("projections: checkpoint moved, re-reading from it")

// lockKeySQL is the session advisory lock key of a projector (name in $1).
const lockKeySQL = `hashtext('projection:' || $1)`

// toDB stores a uint64 position part as its bit pattern, so that any value
// round-trips exactly; comparisons happen in Go.
func toDB(u uint64) int64 { return int64(u) }

func fromDB(i int64) uint64 { return uint64(i) }

// ensureCheckpoint creates the projector's checkpoint row at Start if absent.
func ensureCheckpoint(ctx context.Context, pool *pgxpool.Pool, name string) error {
	_, err := pool.Exec(ctx,
		`INSERT INTO projection_checkpoints (name) VALUES ($1) ON CONFLICT (name) DO NOTHING`, name)
	return err
}

// lockCheckpoint reads the checkpoint row FOR UPDATE within tx.
func lockCheckpoint(ctx context.Context, tx pgx.Tx, name string) (eventstore.Position, error) {
	var c, p int64
	err := tx.QueryRow(ctx,
		`SELECT commit_pos, prepare_pos FROM projection_checkpoints WHERE name = $1 FOR UPDATE`, name).Scan(&c, &p)
	if errors.Is(err, pgx.ErrNoRows) {
		return eventstore.Position{}, fmt.Errorf("projections: no checkpoint row for %q", name)
	}
	if err != nil {
		return eventstore.Position{}, err
	}
	return eventstore.Position{Commit: fromDB(c), Prepare: fromDB(p)}, nil
}

func storeCheckpoint(ctx context.Context, tx pgx.Tx, name string, pos eventstore.Position) error {
	_, err := tx.Exec(ctx,
		`UPDATE projection_checkpoints
		    SET commit_pos = $2, prepare_pos = $3, updated_at = now(), last_error = NULL, last_error_at = NULL
		  WHERE name = $1`,
		name, toDB(pos.Commit), toDB(pos.Prepare))
	return err
}

// loadCheckpoints reads the stored checkpoints of names; absent rows are
// missing from the map.
func loadCheckpoints(ctx context.Context, pool *pgxpool.Pool, names []string) (map[string]eventstore.Position, error) {
	rows, err := pool.Query(ctx,
		`SELECT name, commit_pos, prepare_pos FROM projection_checkpoints WHERE name = ANY($1)`, names)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]eventstore.Position, len(names))
	for rows.Next() {
		var (
			n    string
			c, p int64
		)
		if err := rows.Scan(&n, &c, &p); err != nil {
			return nil, err
		}
		out[n] = eventstore.Position{Commit: fromDB(c), Prepare: fromDB(p)}
	}
	return out, rows.Err()
}

// prepare makes sure the projector's tables and checkpoint row exist and
// returns its checkpoint. The DDL runs under the checkpoint row lock so that
// it never races a rebuild's table swap.
func prepare(ctx context.Context, pool *pgxpool.Pool, p Projector) (eventstore.Position, error) {
	if err := ensureCheckpoint(ctx, pool, p.Name()); err != nil {
		return eventstore.Position{}, err
	}
	var pos eventstore.Position
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		if pos, err = lockCheckpoint(ctx, tx, p.Name()); err != nil {
			return err
		}
		if ddl := p.Schema(); ddl != "" {
			if _, err := tx.Exec(ctx, ddl); err != nil {
				return fmt.Errorf("schema: %w", err)
			}
		}
		return nil
	})
	return pos, err
}

// applyBatch applies events, which follow position expected in the log, and
// moves the checkpoint to their end, in one transaction. The checkpoint is
// moved only if it is still at expected; if another applier moved it (an
// overlapping applier, or a rebuild swapping the tables in) nothing is
// applied, not even in a transaction that rolls back, and errResync tells
// the caller to re-read the stored checkpoint and continue from there. It
// returns the new checkpoint.
func applyBatch(ctx context.Context, pool *pgxpool.Pool, p Projector, expected eventstore.Position, events []eventstore.RecordedEvent) (eventstore.Position, error) {
	if len(events) == 0 {
		return expected, nil
	}
	if pl, ok := p.(Planner); ok {
		return applyPlanned(ctx, pool, p, pl, expected, events)
	}
	last := events[len(events)-1].Position
	// A read model is derived data whose checkpoint commits with it: if the
	// server crashes before this commit reaches disk, both roll back together
	// and the batch is applied again from the durable log. So the commit need
	// not wait for the WAL flush, which takes one fsync off the latency of
	// every write that waits for its read model.
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: `BEGIN; SET LOCAL synchronous_commit TO off`})
	if err != nil {
		return eventstore.Position{}, err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // after Commit it is a no-op
	// The checkpoint moves first: the update locks its row before any
	// read-model table is touched (the order prepare's schema changes take
	// too, else the two deadlock), and only an applier that finds it at
	// expected applies. Apply must only ever see read models at expected:
	// over rows already past the batch it would fold the batch in a second
	// time, and though that transaction rolls back, what a projector
	// remembers of it (the escrow states) would not.
	if _, err := tx.Exec(ctx, advanceSQL, advanceArgs(p.Name(), expected, last)...); err != nil {
		return eventstore.Position{}, advanceErr(err)
	}
	committed := false
	if o, ok := p.(CommitObserver); ok {
		defer func() { o.Committed(committed) }()
	}
	if err := p.Apply(ctx, tx, events); err != nil {
		return eventstore.Position{}, fmt.Errorf("apply: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return eventstore.Position{}, err
	}
	committed = true
	return last, nil
}

// applyPlanned is applyBatch for a Planner, in one round trip: a pipeline
// of the commit setting, the checkpoint move (projection_advance, which
// raises EP001 unless the checkpoint is at expected) and the planned
// writes, ending in one Sync, so that they run as one implicit transaction
// and an error anywhere rolls back all of it. synchronous_commit is off for
// the reason applyBatch gives, with set_config local to the transaction
// (SET LOCAL is documented for explicit transaction blocks only).
func applyPlanned(ctx context.Context, pool *pgxpool.Pool, p Projector, pl Planner, expected eventstore.Position, events []eventstore.RecordedEvent) (eventstore.Position, error) {
	last := events[len(events)-1].Position
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('synchronous_commit', 'off', true)`)
	b.Queue(advanceSQL, advanceArgs(p.Name(), expected, last)...)
	committed := false
	if o, ok := p.(CommitObserver); ok {
		defer func() { o.Committed(committed) }()
	}
	onCommit, err := pl.Plan(ctx, pool, events, b)
	if err != nil {
		return eventstore.Position{}, fmt.Errorf("apply: %w", err)
	}
	if err := advanceErr(pool.SendBatch(ctx, b).Close()); err != nil {
		if errors.Is(err, errResync) {
			return eventstore.Position{}, err
		}
		return eventstore.Position{}, fmt.Errorf("apply: %w", err)
	}
	committed = true
	if onCommit != nil {
		onCommit()
	}
	return last, nil
}

// validName reports whether name is a usable projector name: it is stored,
// used in advisory lock keys and in shadow schema names.
func validName(name string) bool {
	if name == "" || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// advanceSQL moves checkpoint $1 to ($2, $3) if it is at ($4, $5), and
// raises EP001 if it is not (migrations/0010): the one move of every
// single applier, waiting for the row lock so that an overlapping
// applier's commit decides (its move wins, this one finds the checkpoint
// elsewhere). advanceArgs gives its arguments, advanceErr reads its error.
const advanceSQL = `SELECT projection_advance($1, $2, $3, $4, $5)`

func advanceArgs(name string, expected, next eventstore.Position) []any {
	return []any{name, toDB(next.Commit), toDB(next.Prepare), toDB(expected.Commit), toDB(expected.Prepare)}
}

// advanceErr is errResync for a checkpoint found elsewhere, err otherwise.
func advanceErr(err error) error {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "EP001" {
		return errResync
	}
	return err
}

// applyUpTo applies the log from the stored checkpoint until it is at or
// after target. The caller should hold the projector's advisory lock, but
// correctness does not depend on it (applyBatch re-syncs).
func applyUpTo(ctx context.Context, store eventstore.Store, pool *pgxpool.Pool, p Projector, target eventstore.Position, batch int) (eventstore.Position, error) {
	pos, err := prepare(ctx, pool, p)
	if err != nil {
		return pos, err
	}
	var waited time.Duration
	for pos.Less(target) {
		events, err := store.ReadAll(ctx, pos, batch)
		if err != nil {
			return pos, err
		}
		if len(events) == 0 {
			// target is not readable yet: an older write transaction is
			// still open. Wait for it, within the stall limit.
			if waited > catchUpStall {
				return pos, fmt.Errorf("%w: %s stuck at %s, waiting for %s", ErrLagging, p.Name(), pos, target)
			}
			if !sleep(ctx, 5*time.Millisecond) {
				return pos, ctx.Err()
			}
			waited += 5 * time.Millisecond
			continue
		}
		waited = 0
		var next eventstore.Position
		if concerns(p, events) {
			next, err = applyBatch(ctx, pool, p, pos, events)
		} else {
			next = events[len(events)-1].Position
			err = skipBatch(ctx, pool, p.Name(), pos, next)
		}
		if errors.Is(err, errResync) {
			cps, err := loadCheckpoints(ctx, pool, []string{p.Name()})
			if err != nil {
				return pos, err
			}
			pos = cps[p.Name()]
			continue
		}
		if err != nil {
			return pos, err
		}
		pos = next
	}
	return pos, nil
}

// recordError stores a projector's last failure for Status (best effort).
func recordError(ctx context.Context, pool *pgxpool.Pool, name string, failure error) error {
	_, err := pool.Exec(ctx,
		`UPDATE projection_checkpoints SET last_error = $2, last_error_at = now() WHERE name = $1`,
		name, failure.Error())
	return err
}
