// The skipped-batch checkpointer of a following projector, and the flusher
// that stores the skips of all of a runner's projectors together.

package projections

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/eventstore"
)

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
// about one round trip per lifecycle, a tenth of them.
type skipFlusher struct {
	r *Runner

	mu    sync.Mutex
	set   map[*checkpointer]struct{}
	armed bool
	// flushing counts the flushes under way: with none, and none armed,
	// every skip recorded so far has been stored or found overtaken.
	flushing int
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
	defer func() {
		f.mu.Lock()
		f.flushing--
		f.mu.Unlock()
	}()
	f.mu.Lock()
	f.flushing++
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
