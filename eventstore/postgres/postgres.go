// Package postgres is the PostgreSQL adapter of the event store port.
//
// Global order is (transaction id, sequence). ReadAll only returns events
// written by transactions older than the oldest transaction still running,
// so a reader that advances past an event never misses one that commits
// later with an earlier position. Appends are a single call of the es_append
// function (one round trip); NOTIFY is sent after commit, outside the append
// transaction, because NOTIFY inside a transaction serialises commits.
package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/eventstore"
)

const notifyChannel = "escrowd_events"

// Store implements eventstore.Store on PostgreSQL.
type Store struct {
	pool *pgxpool.Pool
	wake *broadcaster

	tail *tail
	bg   context.Context // lives until Close

	notifyOnce sync.Once
	notifyCh   chan struct{}
	// self is the payload of this store's notifications, so that its own
	// listener knows them: its appends woke its subscribers already.
	self string
	stop context.CancelFunc
	done chan struct{}

	// PollInterval bounds how long a subscriber sleeps without a wake-up.
	PollInterval time.Duration
	// AppendCalls is how many appends may run at once before the next ones
	// queue and go together in one call (batch.go); 0 turns grouping off.
	// Set it before the first Append.
	AppendCalls int
	group       appendGroup
	// loseAnswer, in tests, drops the answer of a group call that
	// committed, as a connection lost after the commit does.
	loseAnswer func() bool
}

// New returns a store on pool and starts its LISTEN loop and NOTIFY sender.
// Close stops them; the pool stays the caller's.
func New(pool *pgxpool.Pool) *Store {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Store{
		pool:         pool,
		wake:         newBroadcaster(),
		notifyCh:     make(chan struct{}, 1),
		stop:         cancel,
		done:         make(chan struct{}),
		PollInterval: 500 * time.Millisecond,
		AppendCalls:  DefaultAppendCalls,
		bg:           ctx,
		self:         uuid.NewString(),
	}
	s.tail = newTail(s)
	go func() {
		defer close(s.done)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); s.listen(ctx) }()
		go func() { defer wg.Done(); s.sendNotifications(ctx) }()
		wg.Wait()
	}()
	return s
}

// Close stops the background loops.
func (s *Store) Close() {
	s.stop()
	<-s.done
	s.tail.mu.Lock()
	started := s.tail.state != 0
	s.tail.mu.Unlock()
	if started {
		<-s.tail.done
	}
}

// Pool exposes the pool for adapters that share it (projections).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

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
	// driver.Valuer, a string it then parses back, about 8% of a webhook
	// benchmark's Go time.
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
	err := call(false)
	if err != nil && len(r.ids) > 0 && isRaceLoss(err) {
		// If any of the ids is stored now, a second call with the check
		// settles it: events only ever get added, so it takes the idempotent
		// path or reports the ids as stored elsewhere.
		var stored bool
		if qerr := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM es_events WHERE event_id = ANY ($1::uuid[]))`, r.ids).Scan(&stored); qerr != nil {
			r.err = qerr
			return
		}
		if stored {
			err = call(true)
		}
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

func jsonOrNull(b []byte) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

// storableEscapes refuses the two things that are valid JSON, that the
// json column type accepts, and that jsonb, which the store used before
// (migration 0007), refused: the escape \u0000 (no PostgreSQL text can hold
// the character, so an event carrying it would be stored and then stop
// every projection that writes the string to a text column) and UTF-16
// surrogate escapes that are not a high one followed directly by a low
// one. Everything else, invalid JSON included, is left to PostgreSQL,
// which refuses what is not valid JSON. Data without a backslash, almost
// all of it, costs one IndexByte.
func storableEscapes(b []byte) error {
	for i := 0; ; {
		k := bytes.IndexByte(b[i:], '\\')
		if k < 0 {
			return nil
		}
		i += k
		if i+1 >= len(b) {
			return nil // not valid JSON: PostgreSQL refuses it
		}
		if b[i+1] != 'u' {
			i += 2 // \", \\, \/, \b ...: the escaped byte is never a backslash that starts an escape
			continue
		}
		cp, ok := hex4(b[i+2:])
		if !ok {
			return nil // not valid JSON: PostgreSQL refuses it
		}
		switch {
		case cp == 0:
			return errNULEscape
		case cp >= 0xD800 && cp <= 0xDBFF:
			if len(b) >= i+12 && b[i+6] == '\\' && b[i+7] == 'u' {
				if lo, ok := hex4(b[i+8:]); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 12
					continue
				}
			}
			return errSurrogateEscape
		case cp >= 0xDC00 && cp <= 0xDFFF:
			return errSurrogateEscape
		}
		i += 6
	}
}

var (
	errNULEscape       = errors.New("unsupported Unicode escape sequence: \\u0000 cannot be stored as text")
	errSurrogateEscape = errors.New("invalid JSON: a Unicode surrogate escape that is not a high one followed by a low one")
)

// hex4 reads the four hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
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

// eventColumns aliases the text form of tx_id: unaliased, "tx_id::text" is
// an output column named tx_id, and a bare ORDER BY tx_id would then sort
// by that text ("1003" before "998"), reordering and skipping events each
// time transaction ids gain a digit. ORDER BY clauses qualify the column
// for the same reason.
const eventColumns = `event_id, stream_id, revision, tx_id::text AS commit_text, seq, event_type, data, metadata, recorded_at`

func scanEvents(rows pgx.Rows) ([]eventstore.RecordedEvent, error) {
	defer rows.Close()
	var out []eventstore.RecordedEvent
	for rows.Next() {
		var (
			e    eventstore.RecordedEvent
			tx   string
			seq  int64
			rev  int64
			meta []byte
		)
		if err := rows.Scan(&e.ID, &e.Stream, &rev, &tx, &seq, &e.Type, &e.Data, &meta, &e.RecordedAt); err != nil {
			return nil, err
		}
		commit, err := strconv.ParseUint(tx, 10, 64)
		if err != nil {
			return nil, err
		}
		e.Revision = uint64(rev)
		e.Position = eventstore.Position{Commit: commit, Prepare: uint64(seq)}
		e.Metadata = meta
		out = append(out, e)
	}
	return out, rows.Err()
}

func (s *Store) ReadStream(ctx context.Context, stream string, from uint64, limit int) ([]eventstore.RecordedEvent, error) {
	if limit <= 0 {
		limit = 1 << 30
	}
	rows, err := s.pool.Query(ctx,
		`SELECT `+eventColumns+` FROM es_events WHERE stream_id = $1 AND revision >= $2 ORDER BY es_events.revision LIMIT $3`,
		stream, int64(from), limit)
	if err != nil {
		return nil, err
	}
	return scanEvents(rows)
}

func (s *Store) ReadAll(ctx context.Context, after eventstore.Position, limit int) ([]eventstore.RecordedEvent, error) {
	if limit <= 0 {
		limit = 1000
	}
	rows, err := s.pool.Query(ctx,
		`SELECT `+eventColumns+` FROM es_events
		 WHERE (tx_id, seq) > ($1::text::xid8, $2)
		   AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
		 ORDER BY es_events.tx_id, es_events.seq LIMIT $3`,
		strconv.FormatUint(after.Commit, 10), int64(after.Prepare), limit)
	if err != nil {
		return nil, err
	}
	return scanEvents(rows)
}

// ReadTenant reads one tenant's events through es_events_tenant_idx
// (migration 0014), under the same horizon as ReadAll.
func (s *Store) ReadTenant(ctx context.Context, f eventstore.TenantFilter, after eventstore.Position, skip, limit int) ([]eventstore.RecordedEvent, error) {
	if limit <= 0 {
		limit = 1000
	}
	where, args := tenantWhere(f)
	query, args := tenantQuery(where, args, after, skip, limit)
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return scanEvents(rows)
}

// tenantQuery is ReadTenant's statement.
func tenantQuery(where string, args []any, after eventstore.Position, skip, limit int) (string, []any) {
	args = append(args, strconv.FormatUint(after.Commit, 10), int64(after.Prepare), limit, max(skip, 0))
	n := len(args)
	return `SELECT ` + eventColumns + ` FROM es_events WHERE ` + where +
		fmt.Sprintf(` AND (tx_id, seq) > ($%d::text::xid8, $%d)`, n-3, n-2) +
		` ORDER BY es_events.tx_id, es_events.seq` + fmt.Sprintf(` LIMIT $%d OFFSET $%d`, n-1, n), args
}

// CountTenant counts the events ReadTenant can return.
func (s *Store) CountTenant(ctx context.Context, f eventstore.TenantFilter) (int64, error) {
	where, args := tenantWhere(f)
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM es_events WHERE `+where, args...).Scan(&n)
	return n, err
}

// tenantWhere is the condition of a tenant's visible events; its first two
// terms are the leading columns of es_events_tenant_idx, written exactly
// as the index's expressions so the planner matches them.
func tenantWhere(f eventstore.TenantFilter) (string, []any) {
	where := `(metadata ->> 'merchantId') = $1 AND (metadata ->> 'environment') = $2
		AND tx_id < pg_snapshot_xmin(pg_current_snapshot())`
	args := []any{f.MerchantID, f.Environment}
	if f.Type != "" {
		args = append(args, f.Type)
		if f.TypePrefix() {
			where += fmt.Sprintf(` AND starts_with(event_type, $%d)`, len(args))
		} else {
			where += fmt.Sprintf(` AND event_type = $%d`, len(args))
		}
	}
	if !f.From.IsZero() {
		args = append(args, f.From)
		where += fmt.Sprintf(` AND recorded_at >= $%d`, len(args))
	}
	if !f.To.IsZero() {
		args = append(args, f.To)
		where += fmt.Sprintf(` AND recorded_at < $%d`, len(args))
	}
	return where, args
}

func (s *Store) Head(ctx context.Context) (eventstore.Position, error) {
	return s.newest(ctx, `SELECT tx_id::text AS commit_text, seq FROM es_events
		 WHERE tx_id < pg_snapshot_xmin(pg_current_snapshot())
		 ORDER BY es_events.tx_id DESC, es_events.seq DESC LIMIT 1`)
}

// Last is the newest event of the statement's snapshot, past the horizon
// Head respects: an acknowledged append committed before the statement
// began, so it is visible to it, and its transaction id is at most the
// newest one seen.
func (s *Store) Last(ctx context.Context) (eventstore.Position, error) {
	return s.newest(ctx, `SELECT tx_id::text AS commit_text, seq FROM es_events
		 ORDER BY es_events.tx_id DESC, es_events.seq DESC LIMIT 1`)
}

// newest runs a query for one event position (Start when it finds none).
func (s *Store) newest(ctx context.Context, query string) (eventstore.Position, error) {
	var (
		tx  string
		seq int64
	)
	err := s.pool.QueryRow(ctx, query).Scan(&tx, &seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return eventstore.Start, nil
	}
	if err != nil {
		return eventstore.Position{}, err
	}
	commit, err := strconv.ParseUint(tx, 10, 64)
	if err != nil {
		return eventstore.Position{}, err
	}
	return eventstore.Position{Commit: commit, Prepare: uint64(seq)}, nil
}

// Subscribe catches up from after, then follows. Near the end of the log it
// takes events from the store's shared tail (one query per wake-up for all
// subscribers); further back it reads the database in batches.
func (s *Store) Subscribe(ctx context.Context, after eventstore.Position, handle func(context.Context, []eventstore.RecordedEvent) error) error {
	const batch = 500
	s.tail.ensure(ctx, s.bg)
	pos := after
	for {
		gen := s.tail.moved.generation()
		events, inWindow := s.tail.since(pos, batch)
		if !inWindow {
			var err error
			if events, err = s.ReadAll(ctx, pos, batch); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return err
			}
		}
		if len(events) > 0 {
			if err := handle(ctx, events); err != nil {
				return err
			}
			pos = events[len(events)-1].Position
			continue
		}
		// Nothing new: wait for the tail to move (it is woken by appends);
		// the timeout covers a tail that is not running.
		if _, err := s.tail.moved.wait(ctx, gen, s.PollInterval); err != nil {
			return err
		}
		s.tail.ensure(ctx, s.bg)
	}
}

// listen holds one connection LISTENing for appends of other processes.
func (s *Store) listen(ctx context.Context) {
	for ctx.Err() == nil {
		err := func() error {
			conn, err := s.pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
				return err
			}
			defer conn.Exec(context.Background(), "UNLISTEN "+notifyChannel) //nolint:errcheck
			for {
				n, err := conn.Conn().WaitForNotification(ctx)
				if err != nil {
					return err
				}
				if n.Payload == s.self {
					// This store's own append, which woke its subscribers
					// when it returned: waking them again would only cost
					// each another read of the log.
					continue
				}
				s.wake.broadcast()
			}
		}()
		if err != nil && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// sendNotifications tells other processes about appends, coalescing bursts
// into one NOTIFY so that notification never throttles writers.
//
// Close does not cut a notification short, and sends a pending one: a
// process that appends and exits at once (an operator command revoking a
// key) must still wake the other processes' subscribers, or they would see
// its events only at their next poll.
func (s *Store) sendNotifications(ctx context.Context) {
	notify := func() {
		nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = s.pool.Exec(nctx, `SELECT pg_notify($1, $2)`, notifyChannel, s.self)
	}
	for {
		select {
		case <-ctx.Done():
			select {
			case <-s.notifyCh:
				notify()
			default:
			}
			return
		case <-s.notifyCh:
			notify()
		}
	}
}

// broadcaster wakes every waiter at once: waiters hold the channel of the
// generation they saw and broadcast closes it.
type broadcaster struct {
	mu  sync.Mutex
	gen uint64
	ch  chan struct{}
}

func newBroadcaster() *broadcaster { return &broadcaster{ch: make(chan struct{})} }

func (b *broadcaster) generation() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.gen
}

func (b *broadcaster) broadcast() {
	b.mu.Lock()
	close(b.ch)
	b.ch = make(chan struct{})
	b.gen++
	b.mu.Unlock()
}

// wait returns true when a broadcast happened after generation gen, false
// on timeout.
func (b *broadcaster) wait(ctx context.Context, gen uint64, timeout time.Duration) (bool, error) {
	b.mu.Lock()
	if b.gen != gen {
		b.mu.Unlock()
		return true, nil
	}
	ch := b.ch
	b.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-ch:
		return true, nil
	case <-t.C:
		return false, nil
	}
}

// CountEvents counts the events in (after, upTo] with one index range scan,
// so lag reporting (readiness, status) never reads the events themselves.
// With limit > 0 the scan stops at limit events: a far-behind checkpoint
// costs a readiness probe no more than a near one.
func (s *Store) CountEvents(ctx context.Context, after, upTo eventstore.Position, limit int64) (int64, error) {
	if !after.Less(upTo) {
		return 0, nil
	}
	if limit <= 0 {
		limit = math.MaxInt64
	}
	var n int64
	err := s.pool.QueryRow(ctx,
		`SELECT count(*) FROM (SELECT 1 FROM es_events
		 WHERE (tx_id, seq) > ($1::text::xid8, $2) AND (tx_id, seq) <= ($3::text::xid8, $4) LIMIT $5) s`,
		strconv.FormatUint(after.Commit, 10), int64(after.Prepare),
		strconv.FormatUint(upTo.Commit, 10), int64(upTo.Prepare), limit).Scan(&n)
	return n, err
}

// Horizon reports events that have committed but lie beyond the visibility
// horizon Head and ReadAll respect: they wait for an older transaction (in
// any database of the server, since transaction ids are server-wide) to end.
// The oldest such transaction is looked up in pg_stat_activity and
// pg_prepared_xacts only when the oldest held event has waited longer than
// explainAfter; without the pg_read_all_stats role another user's session
// shows without its query.
func (s *Store) Horizon(ctx context.Context, limit int64, explainAfter time.Duration) (eventstore.Horizon, error) {
	if limit <= 0 {
		limit = math.MaxInt64
	}
	var (
		h      eventstore.Horizon
		waited float64
	)
	// The primary key (tx_id, seq) finds the held events; the lowest
	// transaction ids come first, so the oldest event is among any capped
	// prefix.
	err := s.pool.QueryRow(ctx,
		`SELECT count(*), coalesce(extract(epoch FROM clock_timestamp() - min(recorded_at)), 0)::float8
		 FROM (SELECT recorded_at FROM es_events
		       WHERE tx_id >= pg_snapshot_xmin(pg_current_snapshot())
		       ORDER BY tx_id, seq LIMIT $1) held`, limit).Scan(&h.Held, &waited)
	if err != nil {
		return eventstore.Horizon{}, err
	}
	if h.Held == 0 {
		return h, nil
	}
	h.HeldFor = time.Duration(waited * float64(time.Second))
	if h.HeldFor <= explainAfter {
		return h, nil
	}
	err = s.pool.QueryRow(ctx,
		`SELECT descr FROM (
		   SELECT format('pid %s in database %s (user %s, application %s, %s, transaction open for %s): %s',
		                 pid, coalesce(datname, '?'), coalesce(usename, '?'), coalesce(nullif(application_name, ''), '-'),
		                 coalesce(state, 'state hidden'), date_trunc('second', clock_timestamp() - xact_start),
		                 coalesce(left(query, 200), 'query hidden')) AS descr,
		          age(backend_xid) AS age
		   FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()
		   UNION ALL
		   SELECT format('prepared transaction %L in database %s (owner %s, prepared %s ago)',
		                 gid, database, owner, date_trunc('second', clock_timestamp() - prepared)),
		          age(transaction)
		   FROM pg_prepared_xacts) open
		 ORDER BY age DESC LIMIT 1`).Scan(&h.Blocker)
	if errors.Is(err, pgx.ErrNoRows) {
		// The blocker ended between the two queries.
		return h, nil
	}
	if err != nil {
		return eventstore.Horizon{}, err
	}
	return h, nil
}
