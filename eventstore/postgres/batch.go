package postgres

// Group commit. At most Store.AppendCalls appends run at once, each alone
// with es_append. Appends that arrive while all of them run wait in a queue,
// and the first call to finish takes the queue and sends it as one call of
// es_append_batch (a function of the baseline schema): one round trip, one transaction and one
// WAL flush for all of them, each append still accepted or refused on its
// own. An idle store sends an append at once, alone; under load the calls
// grow with the queue (docs/performance.md, "Event store").

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/escrowd/escrowd/eventstore"
)

const (
	// DefaultAppendCalls is Store.AppendCalls unless set: one call at a
	// time makes the largest groups, and in the escrow lifecycle benchmark
	// two or three at a time, with smaller groups and more appends alone,
	// cost more CPU for no more throughput (docs/performance.md).
	DefaultAppendCalls = 1
	// maxBatchAppends and maxBatchEvents bound one call of es_append_batch.
	maxBatchAppends = 64
	maxBatchEvents  = 1024
	// batchTimeout bounds a call that serves queued appends: their callers'
	// contexts no longer apply once their appends are in a call.
	batchTimeout = 30 * time.Second
)

var errMalformedBatch = errors.New("eventstore: es_append_batch answered for other appends")

type appendGroup struct {
	mu      sync.Mutex
	queue   []*appendReq
	running int

	alone   atomic.Uint64 // appends sent alone
	calls   atomic.Uint64 // calls of es_append_batch
	batched atomic.Uint64 // appends they carried
}

// submit appends r, alone or with others, and sets its outcome.
func (s *Store) submit(ctx context.Context, r *appendReq) {
	limit := s.AppendCalls
	g := &s.group
	g.mu.Lock()
	if limit <= 0 || g.running < limit {
		g.running++
		g.mu.Unlock()
		g.alone.Add(1)
		s.appendOne(ctx, r)
		if r.err == nil {
			s.appended()
		}
		s.next()
		return
	}
	r.done = make(chan struct{})
	g.queue = append(g.queue, r)
	g.mu.Unlock()
	select {
	case <-r.done:
		return
	case <-ctx.Done():
	}
	g.mu.Lock()
	for i, q := range g.queue {
		if q == r {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			g.mu.Unlock()
			r.err = ctx.Err()
			return
		}
	}
	g.mu.Unlock()
	// Already in a call: its outcome is decided there.
	<-r.done
}

// next is called when a call has finished: it sends what queued meanwhile
// as the next call, or frees the call's place.
func (s *Store) next() {
	g := &s.group
	g.mu.Lock()
	if len(g.queue) == 0 {
		g.running--
		g.mu.Unlock()
		return
	}
	batch := g.take()
	g.mu.Unlock()
	go func() {
		s.appendMany(batch)
		s.next()
	}()
}

// take removes from the queue, in order, the appends that can share a call:
// no stream written or locked by one of them is touched by another (streams
// only read without a lock may be shared). The others stay queued, in order,
// for the next call. Called with g.mu held.
func (g *appendGroup) take() []*appendReq {
	var (
		batch  []*appendReq
		locked = make(map[string]bool)
		read   = make(map[string]bool)
		events int
		rest   = g.queue[:0]
	)
	for _, r := range g.queue {
		fits := len(batch) == 0 || (len(batch) < maxBatchAppends && events+len(r.ids) <= maxBatchEvents)
		for i, st := range r.streams {
			if !fits {
				break
			}
			if r.locks(i) {
				fits = !locked[st] && !read[st]
			} else {
				fits = !locked[st]
			}
		}
		if !fits {
			rest = append(rest, r)
			continue
		}
		for i, st := range r.streams {
			if r.locks(i) {
				locked[st] = true
			} else {
				read[st] = true
			}
		}
		events += len(r.ids)
		batch = append(batch, r)
	}
	for i := len(rest); i < len(g.queue); i++ {
		g.queue[i] = nil
	}
	g.queue = rest
	return batch
}

// locks reports whether es_append writes or locks entry i's stream row: it
// gets events, or is an exact check that is not observed.
func (r *appendReq) locks(i int) bool {
	return r.counts[i] > 0 || (r.expected[i] >= 0 && !r.observed(i))
}

// appendMany appends the batch in one call of es_append_batch and closes
// every request's done.
func (s *Store) appendMany(batch []*appendReq) {
	defer func() {
		for _, r := range batch {
			close(r.done)
		}
	}()
	ctx, cancel := context.WithTimeout(s.bg, batchTimeout)
	defer cancel()
	if len(batch) == 1 {
		s.group.alone.Add(1)
		s.appendOne(ctx, batch[0])
		if batch[0].err == nil {
			s.appended()
		}
		return
	}

	// The entries of all appends in byte order of stream, the order
	// es_append locks in; events renumbered to point at them.
	type entry struct{ cmd, i int }
	var entries []entry
	for k, r := range batch {
		for i := range r.streams {
			entries = append(entries, entry{k, i})
		}
	}
	sort.SliceStable(entries, func(a, b int) bool {
		return batch[entries[a].cmd].streams[entries[a].i] < batch[entries[b].cmd].streams[entries[b].i]
	})
	n := len(entries)
	var (
		cmd      = make([]int32, n)
		streams  = make([]string, n)
		expected = make([]int64, n)
		counts   = make([]int32, n)
		observe  = make([]bool, n)
		at       = make([][]int, len(batch)) // at[k][i]: the position of append k's entry i
		ids      []pgtype.UUID
		types    []string
		data     []json.RawMessage
		meta     []json.RawMessage
		sidx     []int32
		off      []int32
	)
	for k, r := range batch {
		at[k] = make([]int, len(r.streams))
	}
	for p, e := range entries {
		r := batch[e.cmd]
		cmd[p], streams[p], expected[p], counts[p], observe[p] = int32(e.cmd+1), r.streams[e.i], r.expected[e.i], r.counts[e.i], r.observed(e.i)
		at[e.cmd][e.i] = p
	}
	for k, r := range batch {
		ids = append(ids, r.ids...)
		types = append(types, r.types...)
		data = append(data, r.data...)
		meta = append(meta, r.meta...)
		off = append(off, r.off...)
		for _, si := range r.sidx {
			sidx = append(sidx, int32(at[k][si-1]+1))
		}
	}

	var (
		tx        string
		ok        []bool
		revisions []pgtype.Int8
		badStream []pgtype.Text
		badRev    []pgtype.Int8
		eventIDs  []pgtype.UUID
		seqs      []int64
	)
	err := s.pool.QueryRow(ctx,
		`SELECT tx, ok, revisions, bad_stream, bad_rev, event_ids, seqs
		 FROM es_append_batch($1, $2, $3, $4, $5, $6::uuid[], $7, $8::json[], $9::json[], $10, $11)`,
		cmd, streams, expected, counts, observe, ids, types, data, meta, sidx, off,
	).Scan(&tx, &ok, &revisions, &badStream, &badRev, &eventIDs, &seqs)
	if err == nil && (len(ok) != len(batch) || len(revisions) != n || len(eventIDs) != len(seqs)) {
		err = errMalformedBatch
	}
	if err == nil && s.afterGroupCall != nil {
		err = s.afterGroupCall()
	}
	if err != nil {
		// The call failed as a whole (an event id stored already, a new
		// stream created meanwhile), or its outcome is unknown (a lost
		// connection, an answer that does not fit the call). Each append
		// alone reports its own outcome: one the call did store comes
		// back from es_append's idempotent path, as a retry would.
		stored := false
		s.group.alone.Add(uint64(len(batch)))
		for _, r := range batch {
			s.appendOne(ctx, r)
			stored = stored || r.err == nil
		}
		if stored {
			s.appended()
		}
		return
	}
	s.group.calls.Add(1)
	s.group.batched.Add(uint64(len(batch)))

	stored := len(eventIDs) > 0
	defer func() {
		if stored {
			s.appended()
		}
	}()
	seqOf := make(map[[16]byte]int64, len(eventIDs))
	for i, id := range eventIDs {
		seqOf[id.Bytes] = seqs[i]
	}
	// A refused append with events may be the retry of one stored already
	// (its first attempt moved the revision it expects): one query finds
	// which refused appends have events stored, and es_append alone decides
	// those (and otherwise refuses again: revisions only grow).
	var refusedIDs []pgtype.UUID
	for k, r := range batch {
		if !ok[k] {
			refusedIDs = append(refusedIDs, r.ids...)
		}
	}
	storedIDs := make(map[[16]byte]bool)
	if len(refusedIDs) > 0 {
		rows, err := s.pool.Query(ctx, `SELECT event_id FROM es_events WHERE event_id = ANY ($1::uuid[])`, refusedIDs)
		if err == nil {
			var id pgtype.UUID
			_, err = pgx.ForEachRow(rows, []any{&id}, func() error { storedIDs[id.Bytes] = true; return nil })
		}
		if err != nil {
			for k, r := range batch {
				if !ok[k] {
					r.err = err
				}
			}
		}
	}
	for k, r := range batch {
		if !ok[k] {
			if r.err != nil {
				continue
			}
			retry := false
			for _, id := range r.ids {
				retry = retry || storedIDs[id.Bytes]
			}
			if retry {
				s.appendOne(ctx, r)
				stored = stored || r.err == nil
				continue
			}
			r.fail(&eventstore.ConcurrencyError{Stream: badStream[k].String, Expected: eventstore.Any, Actual: badRev[k].Int64})
			continue
		}
		var last int64
		for _, id := range r.ids {
			seq, found := seqOf[id.Bytes]
			if !found {
				// Stored (the call committed) but not reported: the
				// caller's retry finds it through the idempotent path.
				r.err = errMalformedBatch
				break
			}
			last = max(last, seq)
		}
		if r.err != nil {
			continue
		}
		revs := make([]int64, len(r.streams))
		for i := range r.streams {
			revs[i] = revisions[at[k][i]].Int64
		}
		r.succeed(tx, last, revs)
	}
}

// AppendStats counts how this store's appends went: sent alone, or in
// grouped calls of es_append_batch (Calls of them, carrying Grouped
// appends). A refused append that es_append then decides alone (a retry
// of one stored already) counts in its group; the appends of a group call
// that failed as a whole count as sent alone, as they then were.
type AppendStats struct {
	Alone, Calls, Grouped uint64
}

// AppendStats reads the counts since the store was made.
func (s *Store) AppendStats() AppendStats {
	return AppendStats{Alone: s.group.alone.Load(), Calls: s.group.calls.Load(), Grouped: s.group.batched.Load()}
}
