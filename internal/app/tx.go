package app

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore"
)

// Tx collects what one command read and decided. Nothing is written until
// the command function returns nil; then every stream with events (and every
// guarded stream) is appended atomically with its expected revision.
type Tx struct {
	ctx     context.Context
	engine  *Engine
	streams map[string]*txStream
	order   []string
	fresh   bool
	// stale: some Read answered from the cache without reading the store,
	// so a refusal may rest on state another instance has changed.
	stale bool
}

// expectation is what the append expects of a stream's revision.
type expectation int

const (
	// unset: the command has neither read nor written the stream.
	unset expectation = iota
	// anyRevision: written without being read (Append), so appended with
	// eventstore.Any.
	anyRevision
	// decidedRevision: the decision rests on rev (read, taken to be absent
	// by ReadNew, or created by Record): appended at exactly rev, or as a
	// new stream when rev is -1.
	decidedRevision
)

// proof is what the append proves of a stream the command read but writes
// no event to.
type proof int

const (
	// noProof: a stream without events is left out of the append.
	noProof proof = iota
	// observed: an unlocked revision check (ReadLatest).
	observed
	// guarded: a locked revision check, as a write's (Guard).
	guarded
)

type txStream struct {
	rev    int64 // revision the decision was based on; -1 no stream
	expect expectation
	proof  proof
	events []domain.Event
	// after refreshes the cache after the append, given the stream's new
	// revision and the id of its last event.
	after func(newRev int64, lastID uuid.UUID)
}

// Read loads aggregate id of kind k within tx.
func Read[S any](tx *Tx, k Kind[S], id string) (S, error) {
	return read(tx, k, id)
}

// ReadLatest is Read for an aggregate the command reads but does not write,
// and whose changes by another process must count at once (an operator's
// new fees). The append proves the state read is current: it observes the
// stream at the revision read (eventstore.StreamAppend.Observed, a check
// without a lock, so commands reading the same merchant do not queue
// behind each other), and a command decided on a stale cached state fails
// it and runs again on the state read from the store. That is what reading
// the store first did, without the read's round trip on every command. A
// written aggregate needs none of this: its expected revision rejects a
// stale decision.
func ReadLatest[S any](tx *Tx, k Kind[S], id string) (S, error) {
	st, err := read(tx, k, id)
	if err != nil {
		return st, err
	}
	if ts := tx.stream(k.StreamName(id)); ts.proof == noProof { // a guard proves more
		ts.proof = observed
	}
	return st, nil
}

// ReadNew is Read for an aggregate the command expects not to exist yet (a
// payment under a reference the client has just made up): unless it is
// cached, it is taken to be absent without a read, and the append proves
// it, expecting no stream. If the stream exists after all, the append
// conflicts and the command runs again with everything read from the
// store; a refusal decided meanwhile is retried the same way, since it may
// rest on the assumption (a repeated payment refused for the balance it
// already spent).
func ReadNew[S any](tx *Tx, k Kind[S], id string) (S, error) {
	stream := k.StreamName(id)
	if _, cached := tx.engine.cache.get(stream); cached || tx.fresh {
		return Read(tx, k, id)
	}
	var zero S
	tx.stale = true
	ts := tx.stream(stream)
	ts.rev, ts.expect = -1, decidedRevision
	return zero, nil
}

func read[S any](tx *Tx, k Kind[S], id string) (S, error) {
	stream := k.StreamName(id)
	state, rev, cachedOnly, err := load(tx.ctx, tx.engine, k, stream, tx.fresh)
	if cachedOnly {
		tx.stale = true
	}
	if err != nil {
		return state, err
	}
	ts := tx.stream(stream)
	// A stream appended to unchecked (Append) is checked once read: the
	// decision now rests on the revision read. One whose revision the
	// command already decided on (read, taken to be new by ReadNew, or
	// created by Record) keeps it: events decided on it must not be
	// appended at a revision read after them.
	if ts.expect != decidedRevision {
		ts.rev = rev
	}
	ts.expect = decidedRevision
	return state, nil
}

// Record appends events to aggregate id of kind k. The stream must have been
// read in this tx (so its revision is checked); otherwise it is created and
// must not exist yet.
func Record[S any](tx *Tx, k Kind[S], id string, events ...domain.Event) {
	record(tx, k, id, decidedRevision, events)
}

// Guard makes the append also prove that aggregate id, read in this tx, is
// still at the revision read: for a decision that depends on an aggregate
// it does not write to (a payout allowed by a whitelist entry must not race
// the entry's removal).
func Guard[S any](tx *Tx, k Kind[S], id string) (S, error) {
	state, err := Read(tx, k, id)
	if err != nil {
		return state, err
	}
	tx.stream(k.StreamName(id)).proof = guarded
	return state, nil
}

// Append appends events to aggregate id without checking its revision
// (unless the stream was read in this tx). Only for events whose validity
// cannot depend on the stream's state, such as a credit to a wallet: it can
// never overdraw, so it need not conflict with concurrent debits or credits.
func Append[S any](tx *Tx, k Kind[S], id string, events ...domain.Event) {
	record(tx, k, id, anyRevision, events)
}

// record adds events to the stream; unread is the expectation of a stream
// the command has not read (a read stream keeps its revision).
func record[S any](tx *Tx, k Kind[S], id string, unread expectation, events []domain.Event) {
	stream := k.StreamName(id)
	ts := tx.stream(stream)
	if ts.expect == unset {
		ts.rev, ts.expect = -1, unread
	}
	ts.events = append(ts.events, events...)
	e := tx.engine
	c := e.cache
	ts.after = func(newRev int64, lastID uuid.UUID) {
		// Fold the new events into the cached state so the next command on
		// this aggregate needs no read.
		since := newRev - int64(len(ts.events))
		var st S
		if hit, ok := c.get(stream); ok && hit.rev == since {
			st = hit.state.(S)
		} else if ok || since != -1 {
			c.evict(stream)
			return
		}
		for _, ev := range ts.events {
			st = k.Apply(st, ev)
		}
		c.put(cached{stream: stream, state: st, rev: newRev})
		if e.snapshotDue(since, newRev) {
			writeSnapshot(e, k, stream, uint64(newRev), lastID, st)
		}
	}
}

func (tx *Tx) stream(name string) *txStream {
	ts, ok := tx.streams[name]
	if !ok {
		ts = &txStream{rev: -1}
		tx.streams[name] = ts
		tx.order = append(tx.order, name)
	}
	return ts
}

// ErrContended is a command that lost the race for its streams on every
// attempt: other requests kept changing the same wallet or escrow. The
// command wrote nothing, so repeating it is safe and finishes it (a 503
// whose Idempotency-Key is released for the repeat, not a 500 replayed
// forever). Resumable also releases the key of a request whose earlier
// commands did write: the only such request, Verify (several steps, a
// batch of references), decides every step afresh from the intent's
// stored phase, so its repeat resumes rather than redoes. A request of
// several commands that is not so must not let this error through as is.
var ErrContended = &domain.Error{Code: domain.Unavailable, Resumable: true,
	Message: "Too many concurrent changes to the same account; retry shortly"}

// Engine executes commands against a store.
type Engine struct {
	store eventstore.Store
	cache *cache
	Now   func() time.Time
	NewID func() uuid.UUID
	// MaxAttempts bounds retries on concurrency conflicts.
	MaxAttempts int
	// SnapshotEvery is how many events of a stream separate its snapshots
	// (snapshot.go); 0 writes none (loads still use those stored).
	SnapshotEvery int
	// snapshotSlots bounds the snapshot writes running at once.
	snapshotSlots chan struct{}
}

// NewEngine returns an engine with a cache of cacheSize aggregates.
func NewEngine(store eventstore.Store, cacheSize int) *Engine {
	return &Engine{
		store:         store,
		cache:         newCache(cacheSize),
		Now:           func() time.Time { return time.Now().UTC() },
		NewID:         func() uuid.UUID { return uuid.Must(uuid.NewV7()) },
		MaxAttempts:   20,
		SnapshotEvery: defaultSnapshotEvery,
		snapshotSlots: make(chan struct{}, 4),
	}
}

// Store returns the underlying event store.
func (e *Engine) Store() eventstore.Store { return e.store }

// ErrNothingToDo is returned by a command function that decided no event is
// needed (an idempotent repeat); Do then returns a zero result and no error.
var ErrNothingToDo = errors.New("app: nothing to append")

// Do runs decide and appends what it recorded, retrying the whole decision
// on a concurrency conflict (the loser re-reads fresh state).
func (e *Engine) Do(ctx context.Context, meta domain.Meta, decide func(tx *Tx) error) (eventstore.AppendResult, error) {
	var lastErr error
	for attempt := 0; attempt < e.MaxAttempts; attempt++ {
		tx := &Tx{ctx: ctx, engine: e, streams: map[string]*txStream{}, fresh: attempt > 0}
		if err := decide(tx); err != nil {
			// A refusal or a "nothing to do" appends nothing, so no expected
			// revision proves the cached state it was decided on: another
			// instance may have credited the wallet or unblocked the customer.
			// Only a decision on state read from the store is final.
			if tx.stale && attempt+1 < e.MaxAttempts {
				lastErr = err
				continue
			}
			if errors.Is(err, ErrNothingToDo) {
				return eventstore.AppendResult{}, nil
			}
			return eventstore.AppendResult{}, err
		}
		appends, metaJSON, err := e.build(tx, meta)
		if err != nil {
			return eventstore.AppendResult{}, err
		}
		if len(appends) == 0 {
			return eventstore.AppendResult{}, nil
		}
		res, err := e.append(ctx, appends, metaJSON)
		if err == nil {
			lastIDs := make(map[string]uuid.UUID, len(appends))
			for _, sa := range appends {
				if n := len(sa.Events); n > 0 {
					lastIDs[sa.Stream] = sa.Events[n-1].ID
				}
			}
			for _, name := range tx.order {
				ts := tx.streams[name]
				if len(ts.events) > 0 && ts.after != nil {
					if rev, ok := res.Revisions[name]; ok {
						ts.after(int64(rev), lastIDs[name])
					}
				}
			}
			return res, nil
		}
		if !errors.Is(err, eventstore.ErrConcurrency) {
			return eventstore.AppendResult{}, err
		}
		lastErr = err
		for _, name := range tx.order {
			e.cache.evict(name)
		}
		// Back off a little so that racing commands interleave; a request
		// that was cancelled meanwhile stops here (nothing was appended).
		if err := ctx.Err(); err != nil {
			return eventstore.AppendResult{}, err
		}
		backoff := time.NewTimer(time.Duration(rand.IntN(1+min(attempt*attempt, 50))) * time.Millisecond)
		select {
		case <-ctx.Done():
			backoff.Stop()
			return eventstore.AppendResult{}, ctx.Err()
		case <-backoff.C:
		}
	}
	if errors.Is(lastErr, eventstore.ErrConcurrency) {
		return eventstore.AppendResult{}, ErrContended
	}
	return eventstore.AppendResult{}, lastErr
}

// append writes appends, under the context's idempotency reservation if any.
func (e *Engine) append(ctx context.Context, appends []eventstore.StreamAppend, metaJSON []byte) (eventstore.AppendResult, error) {
	reservation := reservationFrom(ctx)
	if reservation == nil {
		return e.store.Append(ctx, appends...)
	}
	reservation.mu.Lock()
	defer reservation.mu.Unlock()
	appends, err := reservation.stamp(appends, e, metaJSON)
	if err != nil {
		return eventstore.AppendResult{}, err
	}
	res, err := e.store.Append(ctx, appends...)
	return res, reservation.recordOutcome(res, err)
}

func marshalMeta(meta domain.Meta) ([]byte, error) { return json.Marshal(meta) }

func eventData(e *Engine, ev domain.Event, metaJSON []byte) (eventstore.EventData, error) {
	data, err := json.Marshal(ev)
	if err != nil {
		return eventstore.EventData{}, err
	}
	if len(data)+len(metaJSON) > domain.MaxEventBytes {
		return eventstore.EventData{}, domain.ErrEventTooLarge
	}
	return eventstore.EventData{ID: e.NewID(), Type: ev.EventType(), Data: data, Metadata: metaJSON}, nil
}

func (e *Engine) build(tx *Tx, meta domain.Meta) ([]eventstore.StreamAppend, []byte, error) {
	if meta.OccurredAt.IsZero() {
		meta.OccurredAt = e.Now()
	}
	metaJSON, err := marshalMeta(meta)
	if err != nil {
		return nil, nil, err
	}
	var out []eventstore.StreamAppend
	for _, name := range tx.order {
		ts := tx.streams[name]
		if len(ts.events) == 0 && ts.proof == noProof {
			continue
		}
		sa := eventstore.StreamAppend{Stream: name, Expected: eventstore.NoStream,
			Observed: len(ts.events) == 0 && ts.proof == observed}
		switch {
		case ts.expect == anyRevision:
			sa.Expected = eventstore.Any
		case ts.rev >= 0:
			sa.Expected = eventstore.Exact(uint64(ts.rev))
		}
		for _, ev := range ts.events {
			d, err := eventData(e, ev, metaJSON)
			if err != nil {
				return nil, nil, err
			}
			sa.Events = append(sa.Events, d)
		}
		out = append(out, sa)
	}
	// Observed checks only accompany a write: a command that decided to
	// write nothing proves nothing about what it read (see Do).
	for _, sa := range out {
		if !sa.Observed {
			return out, metaJSON, nil
		}
	}
	return nil, metaJSON, nil
}

// Peek reads an aggregate outside a command from the cache, reading the
// store only on a miss. The state may be behind other instances' appends:
// use it for what staleness cannot make wrong, and re-read with Load before
// refusing on it.
func Peek[S any](ctx context.Context, e *Engine, k Kind[S], id string) (S, error) {
	st, _, _, err := load(ctx, e, k, k.StreamName(id), false)
	return st, err
}

// Load reads an aggregate outside a command (fresh from the store).
func Load[S any](ctx context.Context, e *Engine, k Kind[S], id string) (S, int64, error) {
	st, rev, _, err := load(ctx, e, k, k.StreamName(id), true)
	return st, rev, err
}
