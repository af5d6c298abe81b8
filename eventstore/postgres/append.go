// Appending: one request per call, grouped with concurrent calls into one
// round trip (batch.go), and the mapping of its errors.

package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/escrowd/escrowd/eventstore"
)

func (s *Store) Append(ctx context.Context, appends ...eventstore.StreamAppend) (eventstore.AppendResult, error) {
	r, err := newAppendReq(appends)
	if err != nil {
		return eventstore.AppendResult{}, err
	}
	s.submit(ctx, r)
	return r.res, r.err
}

// appendReq is one Append in es_append's form, and its outcome.
type appendReq struct {
	sorted   []eventstore.StreamAppend
	streams  []string
	expected []int64
	counts   []int32
	// pgtype.UUID, not uuid.UUID: pgx encodes a uuid.UUID through its
	// driver.Valuer, a string it then parses back, a cost on every append.
	ids   []pgtype.UUID
	types []string
	data  []json.RawMessage // the caller's bytes: pgx sends a RawMessage as it is, without a copy to string
	meta  []json.RawMessage // nil metadata: a NULL element
	sidx  []int32
	off   []int32
	// observe is nil unless some check is observed (NULL: none).
	observe []bool

	res  eventstore.AppendResult
	err  error
	done chan struct{} // closed once res and err are set (queued requests)
}

func newAppendReq(appends []eventstore.StreamAppend) (*appendReq, error) {
	if len(appends) == 0 {
		return nil, errors.New("eventstore: empty append")
	}
	// Lock streams in one global order so two appends over the same streams
	// cannot deadlock.
	sorted := make([]eventstore.StreamAppend, len(appends))
	copy(sorted, appends)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Stream < sorted[j].Stream })
	r := &appendReq{
		sorted:   sorted,
		streams:  make([]string, len(sorted)),
		expected: make([]int64, len(sorted)),
		counts:   make([]int32, len(sorted)),
	}
	for i, a := range sorted {
		if a.Stream == "" {
			return nil, errors.New("eventstore: empty stream name")
		}
		if i > 0 && sorted[i-1].Stream == a.Stream {
			return nil, fmt.Errorf("eventstore: stream %q appears twice in one append", a.Stream)
		}
		r.streams[i], r.expected[i], r.counts[i] = a.Stream, int64(a.Expected), int32(len(a.Events))
		if a.Observed && len(a.Events) == 0 {
			if r.observe == nil {
				r.observe = make([]bool, len(sorted))
			}
			r.observe[i] = true
		}
		for k, e := range a.Events {
			if e.Type == "" {
				return nil, errors.New("eventstore: event without type")
			}
			if err := storableEscapes(e.Data); err != nil {
				return nil, fmt.Errorf("eventstore: event %s data: %w", e.ID, err)
			}
			if err := storableEscapes(e.Metadata); err != nil {
				return nil, fmt.Errorf("eventstore: event %s metadata: %w", e.ID, err)
			}
			r.ids = append(r.ids, pgtype.UUID{Bytes: e.ID, Valid: true})
			r.types = append(r.types, e.Type)
			r.data = append(r.data, jsonOrNull(e.Data))
			r.meta = append(r.meta, e.Metadata)
			r.sidx = append(r.sidx, int32(i+1))
			r.off = append(r.off, int32(k))
		}
	}
	return r, nil
}

// observed reports whether entry i is a check without a lock.
func (r *appendReq) observed(i int) bool { return r.observe != nil && r.observe[i] }

// appendOne appends r alone with es_append.
func (s *Store) appendOne(ctx context.Context, r *appendReq) {
	var (
		tx      string
		lastSeq int64
		revs    []int64
	)
	call := func(checkIDs bool) error {
		return s.pool.QueryRow(ctx,
			`SELECT tx, last_seq, revisions FROM es_append($1, $2, $3, $4::uuid[], $5, $6::json[], $7::json[], $8, $9, $10, $11::boolean[])`,
			r.streams, r.expected, r.counts, r.ids, r.types, r.data, r.meta, r.sidx, r.off, checkIDs, r.observe,
		).Scan(&tx, &lastSeq, &revs)
	}
	// The first call skips es_append's idempotency check (an index probe per
	// event that only a retry can need). A retry of an append that already
	// committed cannot pass unnoticed: it fails on the stream revision its
	// first attempt moved, or on the event id's unique index. So does an
	// identical append committing meanwhile (a client retrying while its
	// first attempt is still in flight).
	attempt := func(checkIDs bool) error {
		err := call(checkIDs)
		if err != nil && len(r.ids) > 0 && isRaceLoss(err) {
			// If any of the ids is stored now, a second call with the check
			// decides it: events only ever get added, so it takes the
			// idempotent path or reports the ids as stored elsewhere.
			var stored bool
			if qerr := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM es_events WHERE event_id = ANY ($1::uuid[]))`, r.ids).Scan(&stored); qerr != nil {
				return qerr
			}
			if stored {
				err = call(true)
			}
		}
		return err
	}
	err := attempt(false)
	if staleTimeout(ctx, err) {
		// The connection reported a read timeout that the append's own
		// context did not cause (it has time left), so the statement may
		// have run and committed. pgx closed that connection; asking once
		// more, on another, with the idempotency check, answers the stored
		// append as stored, or appends it now.
		err = attempt(true)
	}
	if err != nil {
		r.fail(mapError(err))
		return
	}
	r.succeed(tx, lastSeq, revs)
}

// fail records err, with the expectation the caller had of the stream a
// concurrency error names.
func (r *appendReq) fail(err error) {
	var ce *eventstore.ConcurrencyError
	if errors.As(err, &ce) {
		for _, a := range r.sorted {
			if a.Stream == ce.Stream {
				ce.Expected = a.Expected
			}
		}
	}
	r.err = err
}

// succeed records the outcome of a stored append: its transaction, the
// sequence of its last event and each stream's revision after it (-1: the
// stream has no events).
func (r *appendReq) succeed(tx string, lastSeq int64, revs []int64) {
	commit, err := strconv.ParseUint(tx, 10, 64)
	if err != nil {
		r.err = fmt.Errorf("eventstore: bad transaction id %q", tx)
		return
	}
	if len(revs) != len(r.streams) {
		r.err = fmt.Errorf("eventstore: %d revisions for %d streams", len(revs), len(r.streams))
		return
	}
	res := eventstore.AppendResult{
		Position:  eventstore.Position{Commit: commit, Prepare: uint64(lastSeq)},
		Revisions: make(map[string]uint64, len(r.streams)),
	}
	if len(r.ids) == 0 {
		// A pure revision check wrote nothing: there is no position to wait
		// for (es_append reports its own transaction id, which readers would
		// only pass with some later event).
		res.Position = eventstore.Start
	}
	for i, st := range r.streams {
		if revs[i] >= 0 {
			res.Revisions[st] = uint64(revs[i])
		}
	}
	r.res = res
}

// appended wakes this process's subscribers and queues a notification for
// the others.
func (s *Store) appended() {
	s.wake.broadcast()
	select {
	case s.notifyCh <- struct{}{}:
	default:
	}
}

// staleTimeout reports whether err is a network timeout that ctx did not
// cause: ctx has not ended.
func staleTimeout(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	var ne net.Error
	return pgconn.Timeout(err) || (errors.As(err, &ne) && ne.Timeout())
}

// isRaceLoss reports the errors an append gets when a concurrent append of
// the same streams or event ids committed first.
func isRaceLoss(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return pgErr.Code == "ES001" || (pgErr.Code == "23505" && pgErr.ConstraintName == "es_events_event_id_key")
}

// mapError turns exactly the store's own conflict signals into port errors;
// every other database error propagates unchanged.
func mapError(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch {
	case pgErr.Code == "ES001":
		actual, _ := strconv.ParseInt(pgErr.Hint, 10, 64)
		return &eventstore.ConcurrencyError{Stream: pgErr.Detail, Expected: eventstore.Any, Actual: actual}
	case pgErr.Code == "ES002":
		return eventstore.ErrDuplicateEvent
	case pgErr.Code == "23505" && pgErr.ConstraintName == "es_events_stream_revision_key":
		return &eventstore.ConcurrencyError{Stream: "", Expected: eventstore.Any, Actual: -1}
	case pgErr.Code == "23505" && (pgErr.ConstraintName == "es_events_event_id_key" || pgErr.ConstraintName == "es_streams_pkey"):
		// A concurrent append of the same events or the same new stream won
		// the race: report it as the conflict it is.
		if pgErr.ConstraintName == "es_events_event_id_key" {
			return eventstore.ErrDuplicateEvent
		}
		return &eventstore.ConcurrencyError{Stream: "", Expected: eventstore.NoStream, Actual: 0}
	}
	return err
}
