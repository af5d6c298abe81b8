package webhooks

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/view"
)

// The outbox is webhook_deliveries (migrations/0004_webhooks.sql); this file
// holds every statement on it.

// notifyChannel wakes dispatchers: sent inside the enqueueing transaction,
// so it arrives exactly when the rows become visible.
const notifyChannel = "escrowd_webhooks"

// Delivery statuses.
const (
	StatusPending    = "pending"
	StatusDelivering = "delivering"
	StatusDelivered  = "delivered"
	StatusFailed     = "failed"
	StatusNoEndpoint = "no_endpoint"
)

// Statuses lists every delivery status (filters validate against it).
var Statuses = []string{StatusPending, StatusDelivering, StatusDelivered, StatusFailed, StatusNoEndpoint}

// Enqueue inserts msgs within tx; a message whose id is already stored is
// skipped. It notifies dispatchers when it inserted anything and returns how
// many rows it inserted.
func Enqueue(ctx context.Context, tx pgx.Tx, msgs []Message) (int64, error) {
	n, _, err := enqueue(ctx, tx, distinctMessages(msgs), nil, 0)
	return n, err
}

// distinctMessages is msgs without repeats of an id (the first is kept).
func distinctMessages(msgs []Message) []Message {
	out := make([]Message, 0, len(msgs))
	seen := make(map[uuid.UUID]bool, len(msgs))
	for _, m := range msgs {
		if !seen[m.ID] {
			seen[m.ID] = true
			out = append(out, m)
		}
	}
	return out
}

// enqueue inserts msgs (of distinct ids) within tx, skipping any already
// stored. take[i] (take may be nil) asks for msgs[i] to be stored leased
// for its first attempt, for lease, as a claim would lease it: it is
// unless an earlier message of its order key is undelivered (stored, or
// earlier in msgs). It returns how many rows it inserted and the attempts
// it leased, and notifies dispatchers when a message is pending (see
// queueEnqueue).
func enqueue(ctx context.Context, tx pgx.Tx, msgs []Message, take []bool, lease time.Duration) (int64, []claimed, error) {
	b := &pgx.Batch{}
	res := queueEnqueue(b, msgs, take, lease)
	if b.Len() == 0 {
		return 0, nil, nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, nil, err
	}
	return res.inserted, res.leased, nil
}

// enqueued is what queueEnqueue's statements found, filled in as the
// batch's results are read.
type enqueued struct {
	inserted int64
	leased   []claimed
}

// queueEnqueue queues enqueue's statement on b, to run in the same
// transaction (the subscriber's batch goes out in one pipeline with its
// checkpoint move, see projections.Planner). What it did is in the
// result once b's results are read. Besides the insert, from the rows it
// inserted (its RETURNING, not a second look at the table: a message
// stored before, by a repeated batch, neither wakes anyone nor changes
// the commit):
//   - a notification to dispatchers if it inserted a message pending;
//   - synchronous_commit on if it inserted a message leased: an attempt's
//     number must survive a database crash before the attempt is made, or
//     the next lease would reuse it (as a claim's commit).
func queueEnqueue(b *pgx.Batch, msgs []Message, take []bool, lease time.Duration) *enqueued {
	res := &enqueued{}
	if len(msgs) == 0 {
		return res
	}
	n := len(msgs)
	ids, merchants, envs, events, bodies := make([]pgtype.UUID, n), make([]string, n), make([]string, n),
		make([]string, n), make([][]byte, n)
	keys, takes := make([]*string, n), make([]bool, n)
	for i, m := range msgs {
		ids[i] = pgtype.UUID{Bytes: m.ID, Valid: true}
		merchants[i], envs[i], events[i], bodies[i] = m.MerchantID, string(m.Environment), m.Event, m.Body
		if m.OrderKey != "" {
			k := m.OrderKey
			keys[i] = &k
		}
		takes[i] = take != nil && take[i]
	}
	// The order gate is the claim's: a message waits while an earlier one
	// of its key is pending or delivering. Within the batch only the
	// first message of a key may be leased (its next ones are behind it).
	b.Queue(`
		WITH m AS (
		    SELECT u.*, row_number() OVER (PARTITION BY u.order_key ORDER BY u.ord) AS nth
		      FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::bool[])
		           WITH ORDINALITY AS u(id, merchant_id, environment, event, order_key, body, take, ord)
		), g AS (
		    SELECT m.*, m.take AND (m.order_key IS NULL OR m.nth = 1 AND NOT EXISTS (
		               SELECT 1 FROM webhook_deliveries e
		                WHERE e.order_key = m.order_key AND e.status IN ('pending', 'delivering'))) AS leased
		      FROM m
		), ins AS (
		    INSERT INTO webhook_deliveries (id, merchant_id, environment, event, order_key, body,
		                                    status, attempts, lease_until, next_attempt_at)
		    SELECT id, merchant_id, environment, event, order_key, body,
		           CASE WHEN leased THEN 'delivering' ELSE 'pending' END,
		           CASE WHEN leased THEN 1 ELSE 0 END,
		           CASE WHEN leased THEN statement_timestamp() + $8::bigint * interval '1 millisecond' END,
		           CASE WHEN leased THEN statement_timestamp() + $8::bigint * interval '1 millisecond' ELSE now() END
		      FROM g
		     ORDER BY ord
		ON CONFLICT (id) DO NOTHING
		    RETURNING id, status = 'delivering' AS leased
		), f AS (
		    SELECT coalesce(bool_or(NOT leased), false) AS queued, coalesce(bool_or(leased), false) AS took FROM ins
		)
		SELECT id, leased, 0::bigint, 0::bigint FROM ins
		UNION ALL
		SELECT NULL::uuid, NULL::bool,
		       (SELECT count(*) FROM (SELECT pg_notify($9, '') WHERE f.queued) n),
		       (SELECT count(*) FROM (SELECT set_config('synchronous_commit', 'on', true) WHERE f.took) s)
		  FROM f`, ids, merchants, envs, events, keys, bodies, takes, lease.Milliseconds(), notifyChannel,
	).Query(func(rows pgx.Rows) error {
		byID := make(map[uuid.UUID]int, n)
		for i, m := range msgs {
			byID[m.ID] = i
		}
		for rows.Next() {
			var (
				id       pgtype.UUID
				ok       *bool
				one, two int64
			)
			if err := rows.Scan(&id, &ok, &one, &two); err != nil {
				return err
			}
			if !id.Valid { // f's row: the notification and the commit setting
				continue
			}
			res.inserted++
			if !*ok {
				continue
			}
			m := msgs[byID[id.Bytes]]
			res.leased = append(res.leased, claimed{ID: m.ID, MerchantID: m.MerchantID, Environment: m.Environment,
				Event: m.Event, Body: m.Body, Attempt: 1})
		}
		return rows.Err()
	})
	return res
}

// Outbox reads and changes deliveries for the API.
type Outbox struct {
	pool *pgxpool.Pool
	// read, in tests, runs between a delivery log read's statements.
	read func()
}

// snapshot runs the statements of one delivery log read in a read-only
// repeatable-read transaction: the rows, their count and their attempts
// are of one moment, so an outcome recorded meanwhile never shows a
// delivery whose counters and attempt log disagree.
func (o *Outbox) snapshot(ctx context.Context, f func(tx pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, o.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		return f(tx)
	})
}

// between calls the test hook read, if set.
func (o *Outbox) between() {
	if o.read != nil {
		o.read()
	}
}

// NewOutbox returns the outbox on pool.
func NewOutbox(pool *pgxpool.Pool) *Outbox { return &Outbox{pool: pool} }

// Delivery is one message's delivery state, as the delivery log shows it.
type Delivery struct {
	ID             string     `json:"id"`
	Event          string     `json:"event"`
	Status         string     `json:"status"`
	Attempts       int        `json:"attempts"`
	LastStatusCode *int       `json:"lastStatusCode"`
	LastError      *string    `json:"lastError"`
	NextAttemptAt  *time.Time `json:"nextAttemptAt"`
	CreatedAt      time.Time  `json:"createdAt"`
	DeliveredAt    *time.Time `json:"deliveredAt"`
	AttemptLog     []Attempt  `json:"attemptLog"`
}

// Attempt is one try to deliver a message.
type Attempt struct {
	Attempt    int       `json:"attempt"`
	At         time.Time `json:"at"`
	StatusCode *int      `json:"statusCode"`
	Error      *string   `json:"error"`
	DurationMs int       `json:"durationMs"`
}

// DeliveryFilter narrows the delivery log.
type DeliveryFilter struct {
	Status string
	Event  string
}

const deliveryColumns = `id::text, event, status, attempts, last_status_code, last_error, next_attempt_at, created_at, delivered_at,
	last_attempt, last_attempt_at, last_attempt_status_code, last_attempt_error, last_attempt_duration_ms`

// scanDelivery reads a row of deliveryColumns: the delivery, with an empty
// attempt log, and the attempt the row holds (nil: none).
func scanDelivery(row pgx.Row) (Delivery, *Attempt, error) {
	var (
		d    Delivery
		next time.Time
		num  *int
		a    Attempt
		took *int
		at   *time.Time
	)
	if err := row.Scan(&d.ID, &d.Event, &d.Status, &d.Attempts, &d.LastStatusCode, &d.LastError, &next,
		&d.CreatedAt, &d.DeliveredAt, &num, &at, &a.StatusCode, &a.Error, &took); err != nil {
		return d, nil, err
	}
	d.CreatedAt = d.CreatedAt.UTC()
	if d.DeliveredAt != nil {
		t := d.DeliveredAt.UTC()
		d.DeliveredAt = &t
	}
	// Only a waiting message has a next attempt; one in flight shows its
	// lease's end nowhere.
	if d.Status == StatusPending {
		t := next.UTC()
		d.NextAttemptAt = &t
	}
	d.AttemptLog = []Attempt{}
	if num == nil || at == nil || took == nil {
		return d, nil, nil
	}
	a.Attempt, a.At, a.DurationMs = *num, at.UTC(), *took
	return d, &a, nil
}

// List pages a merchant's deliveries of env, newest first, with their
// attempts, as of one moment (snapshot): page p.Page, or the deliveries
// after the delivery p.After (the cursor form). Delivery states change in
// the dispatcher, outside the log, so no projector keeps their totals: the
// count stops at view.BoundedCount, as do page numbers; the cursor
// reaches every row (docs/listings.md).
func (o *Outbox) List(ctx context.Context, merchantID string, env domain.Environment, f DeliveryFilter, p view.Page) ([]Delivery, view.Pagination, error) {
	where := ` WHERE merchant_id = $1 AND environment = $2`
	args := []any{merchantID, string(env)}
	if f.Status != "" {
		args = append(args, f.Status)
		where += ` AND status = $` + strconv.Itoa(len(args))
	}
	if f.Event != "" {
		args = append(args, f.Event)
		where += ` AND event = $` + strconv.Itoa(len(args))
	}
	var (
		count int64
		out   = []Delivery{}
		next  *string
		skip  = int64(p.Page-1) * int64(p.Limit)
	)
	err := o.snapshot(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM webhook_deliveries`+where+
			` LIMIT `+strconv.Itoa(view.BoundedCount)+`) x`, args...).Scan(&count); err != nil {
			return err
		}
		page := slices.Clip(args)
		if p.After != "" {
			id, err := uuid.Parse(p.After)
			if err != nil {
				return view.ErrUnknownCursor
			}
			var seq int64
			err = tx.QueryRow(ctx, `SELECT seq FROM webhook_deliveries WHERE id = $1 AND merchant_id = $2 AND environment = $3`,
				id, merchantID, string(env)).Scan(&seq)
			if errors.Is(err, pgx.ErrNoRows) {
				return view.ErrUnknownCursor
			}
			if err != nil {
				return err
			}
			page = append(page, seq)
			where += ` AND seq < $` + strconv.Itoa(len(page))
			skip = 0
		} else if skip >= count {
			return nil
		}
		page = append(page, p.Limit+1, skip)
		rows, err := tx.Query(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries`+where+
			` ORDER BY seq DESC LIMIT $`+strconv.Itoa(len(page)-1)+` OFFSET $`+strconv.Itoa(len(page)), page...)
		if err != nil {
			return err
		}
		var lasts []*Attempt
		for rows.Next() {
			if len(out) == p.Limit {
				id := out[len(out)-1].ID
				next = &id
				break
			}
			d, last, err := scanDelivery(rows)
			if err != nil {
				rows.Close()
				return err
			}
			out = append(out, d)
			lasts = append(lasts, last)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		o.between()
		return attachAttempts(ctx, tx, out, lasts)
	})
	if err != nil {
		return nil, view.Pagination{}, err
	}
	return out, view.PageOf(p, count, next), nil
}

// attachAttempts fills the attempt log of ds: the attempts in
// webhook_attempts, and lasts[i] (the attempt ds[i]'s row holds; nil for
// none) unless the table has an attempt of its number, in attempt order.
// Read in the same snapshot as the rows, the table never has it (an
// outcome moves the row's attempt there in the statement that replaces
// it); the check keeps the log free of repeats all the same.
func attachAttempts(ctx context.Context, tx pgx.Tx, ds []Delivery, lasts []*Attempt) error {
	if len(ds) == 0 {
		return nil
	}
	ids := make([]string, len(ds))
	byID := make(map[string]*Delivery, len(ds))
	for i := range ds {
		ids[i] = ds[i].ID
		byID[ds[i].ID] = &ds[i]
	}
	rows, err := tx.Query(ctx, `SELECT delivery_id::text, attempt, at, status_code, error, duration_ms
		FROM webhook_attempts WHERE delivery_id = ANY($1::uuid[]) ORDER BY delivery_id, attempt`, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id string
			a  Attempt
		)
		if err := rows.Scan(&id, &a.Attempt, &a.At, &a.StatusCode, &a.Error, &a.DurationMs); err != nil {
			return err
		}
		a.At = a.At.UTC()
		if d := byID[id]; d != nil {
			d.AttemptLog = append(d.AttemptLog, a)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for i, last := range lasts {
		if last == nil {
			continue
		}
		at, found := slices.BinarySearchFunc(ds[i].AttemptLog, last.Attempt, func(a Attempt, n int) int { return cmp.Compare(a.Attempt, n) })
		if !found {
			ds[i].AttemptLog = slices.Insert(ds[i].AttemptLog, at, *last)
		}
	}
	return nil
}

// ErrDeliveryNotFound is the error for an unknown delivery, or one of
// another merchant or environment.
var ErrDeliveryNotFound = domain.Errorf(domain.NotFound, "Delivery not found")

// ErrDeliveryInProgress refuses a manual retry while an attempt runs.
var ErrDeliveryInProgress = domain.Errorf(domain.Conflict, "Delivery is in progress")

// Get returns one of the merchant's deliveries.
func (o *Outbox) Get(ctx context.Context, merchantID string, env domain.Environment, id string) (Delivery, error) {
	if _, err := uuid.Parse(id); err != nil {
		return Delivery{}, ErrDeliveryNotFound
	}
	var ds []Delivery
	err := o.snapshot(ctx, func(tx pgx.Tx) error {
		d, last, err := scanDelivery(tx.QueryRow(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries
			WHERE id = $1 AND merchant_id = $2 AND environment = $3`, id, merchantID, string(env)))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrDeliveryNotFound
		}
		if err != nil {
			return err
		}
		ds = []Delivery{d}
		o.between()
		return attachAttempts(ctx, tx, ds, []*Attempt{last})
	})
	if err != nil {
		return Delivery{}, err
	}
	return ds[0], nil
}

// Retry queues one of the merchant's deliveries for an attempt now, whatever
// its status, unless an attempt is in flight (a delivering row whose lease
// ran out is abandoned, so it may be retried). The attempt count keeps
// growing: a message that had failed gets one more attempt, not a new
// schedule.
func (o *Outbox) Retry(ctx context.Context, merchantID string, env domain.Environment, id string) (Delivery, error) {
	if _, err := uuid.Parse(id); err != nil {
		return Delivery{}, ErrDeliveryNotFound
	}
	var n int64
	err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE webhook_deliveries
			SET status = 'pending', next_attempt_at = now(), lease_until = NULL, finished_at = NULL
			WHERE id = $1 AND merchant_id = $2 AND environment = $3
			  AND (status <> 'delivering' OR lease_until < now())`, id, merchantID, string(env))
		if err != nil {
			return err
		}
		if n = tag.RowsAffected(); n > 0 {
			_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, notifyChannel)
		}
		return err
	})
	if err != nil {
		return Delivery{}, err
	}
	d, err := o.Get(ctx, merchantID, env, id)
	if err != nil {
		return d, err
	}
	if n == 0 {
		return d, ErrDeliveryInProgress
	}
	return d, nil
}

// claimed is a delivery a dispatcher leased for one attempt.
type claimed struct {
	ID          uuid.UUID
	MerchantID  string
	Environment domain.Environment
	Event       string
	Body        []byte
	Attempt     int
}

// claim leases up to n (> 0) due deliveries for one attempt each, in due
// order, skipping rows other dispatchers hold (SKIP LOCKED), messages
// queued behind an earlier undelivered message of their order key, and
// merchants without room. full are merchants known to have none; rooms
// tells how many more attempts each merchant may get as the window shows
// it, with its rows in the select that first showed it (see allotment).
// Leased rows become due again when the lease ends, which is how a dead
// dispatcher's attempts are retried.
//
// It is one transaction: it selects and locks the window, chooses here
// which of its rows to lease, updates only those and commits, which
// releases the others untouched. rooms is asked only about the merchants
// the window holds, so a claim costs the same however many merchants the
// dispatcher remembers. The claim commits synchronously (unlike outcomes):
// its attempt number must survive a database crash, or the next claim
// would reuse it.
//
// starved says the claim may have left due rows for want of room: the
// window left a merchant out (it showed no room, or its room ran out
// there). Merchants full from the start do not count: an attempt of theirs
// that ends wakes the dispatcher anyway (freesRoom), and counting them made
// every claim starved while any merchant was at its cap.
func claim(ctx context.Context, pool *pgxpool.Pool, n int, lease time.Duration, full []string, rooms func(map[string]int) map[string]int) (got []claimed, starved bool, err error) {
	return claimReporting(ctx, pool, n, lease, full, rooms, nil)
}

// claimReporting is claim that also tells picked (when not nil) how many
// rows it picked per merchant, once it has chosen them and before it
// leases them.
func claimReporting(ctx context.Context, pool *pgxpool.Pool, n int, lease time.Duration, full []string,
	rooms func(map[string]int) map[string]int, picked func(map[string]int)) (got []claimed, starved bool, err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, false, err
	}
	// After an error the connection may still be inside the transaction:
	// the pool then closes it, which rolls it back.
	defer conn.Release()
	w := newWindow(n, full, rooms)
	for begin := true; !w.done(); begin = false {
		after, exclude, limit := w.next()
		cands, err := selectWindow(ctx, conn.Conn(), begin, after, exclude, limit)
		if err != nil {
			return nil, false, err
		}
		w.add(cands, limit)
	}
	if picked != nil {
		picked(w.pickedBy)
	}
	got, err = leasePicked(ctx, conn.Conn(), w.picked, lease)
	return got, len(w.exclude) > len(full), err
}

// candidate is a due row of a claim's window.
type candidate struct {
	ID         uuid.UUID
	MerchantID string
	Due        time.Time // next_attempt_at
	Seq        int64
}

// window is the part of the outbox a claim looks at, and the rows it picks
// there. It is read in due order, by selects of up to size rows each (4n,
// at most 1,000: further than n, so that rows the claim cannot take do not
// cost a round trip each), each going on after the last row seen, and it
// picks each row whose merchant has room left, until it has n rows or the
// due rows run out. A merchant without room is left out of the selects
// that follow, whether the allotment knew it full from the start, the
// window showed it without room, or the window used its room up (a
// receiver that fails at once, with a backlog): its rows, however many,
// hide nobody's.
type window struct {
	n        int  // rows to pick
	size     int  // rows a select asks for
	ranOut   bool // a select came back short: no due rows are left to read
	after    candidate
	rooms    func(rows map[string]int) map[string]int
	room     map[string]int // merchants seen: attempts they may still get (none: left out)
	exclude  []string       // merchants the selects leave out
	picked   []uuid.UUID
	pickedBy map[string]int // picked rows per merchant
}

// newWindow is the window of a claim of n rows; full are merchants known
// to have no room, rooms tells the room of merchants as they show up (see
// allotment.rooms).
func newWindow(n int, full []string, rooms func(map[string]int) map[string]int) *window {
	return &window{n: n, size: min(4*n, 1000), rooms: rooms, room: map[string]int{}, pickedBy: map[string]int{},
		// Never nil: <> ALL (NULL) would leave every row out.
		exclude: append([]string{}, full...)}
}

// done says the window needs no further select.
func (w *window) done() bool { return len(w.picked) == w.n || w.ranOut }

// next is the next select: after the last row seen (the zero candidate
// before the first, which every row follows), without the merchants known
// to have no room.
func (w *window) next() (after candidate, exclude []string, limit int) {
	return w.after, w.exclude, w.size
}

// add takes the rows a select of limit rows returned.
func (w *window) add(cands []candidate, limit int) {
	w.ranOut = len(cands) < limit
	fresh := map[string]int{}
	for _, c := range cands {
		if _, seen := w.room[c.MerchantID]; !seen {
			fresh[c.MerchantID]++
		}
	}
	for m, r := range w.rooms(fresh) {
		w.room[m] = r
		if r <= 0 {
			w.exclude = append(w.exclude, m)
		}
	}
	for _, c := range cands {
		w.after = c
		if len(w.picked) == w.n || w.room[c.MerchantID] <= 0 {
			continue
		}
		w.picked = append(w.picked, c.ID)
		w.pickedBy[c.MerchantID]++
		if w.room[c.MerchantID]--; w.room[c.MerchantID] == 0 {
			w.exclude = append(w.exclude, c.MerchantID)
		}
	}
}

// selectWindow selects and locks up to limit due rows after after, of
// merchants not in exclude, skipping rows other transactions hold and rows
// queued behind an earlier undelivered row of their order key. begin starts
// the claim's transaction in the same round trip.
func selectWindow(ctx context.Context, conn *pgx.Conn, begin bool, after candidate, exclude []string, limit int) ([]candidate, error) {
	b := &pgx.Batch{}
	if begin {
		b.Queue(`BEGIN`)
	}
	b.Queue(`
		SELECT d.id, d.merchant_id, d.next_attempt_at, d.seq
		  FROM webhook_deliveries d
		 WHERE d.status IN ('pending', 'delivering') AND d.next_attempt_at <= now()
		   AND (d.next_attempt_at, d.seq) > ($1::timestamptz, $2::bigint)
		   AND d.merchant_id <> ALL ($3::text[])
		   AND (d.order_key IS NULL OR NOT EXISTS (
		        SELECT 1 FROM webhook_deliveries p
		         WHERE p.order_key = d.order_key AND p.seq < d.seq
		           AND p.status IN ('pending', 'delivering')))
		 ORDER BY d.next_attempt_at, d.seq
		 LIMIT $4
		 FOR UPDATE SKIP LOCKED`, after.Due, after.Seq, exclude, limit)
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	if begin {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	cands, err := pgx.CollectRows(rows, pgx.RowToStructByPos[candidate])
	if err != nil {
		return nil, err
	}
	return cands, br.Close()
}

// leasePicked leases the rows picked, as the claim's attempt, and commits
// in the same round trip. With none picked it rolls back instead: there is
// nothing to keep, so nothing to wait for.
func leasePicked(ctx context.Context, conn *pgx.Conn, ids []uuid.UUID, lease time.Duration) ([]claimed, error) {
	if len(ids) == 0 {
		_, err := conn.Exec(ctx, `ROLLBACK`)
		return nil, err
	}
	b := &pgx.Batch{}
	// statement_timestamp, not now(): the lease runs from the update, not
	// from the start of the transaction.
	b.Queue(`
		UPDATE webhook_deliveries d
		   SET status = 'delivering', attempts = d.attempts + 1,
		       lease_until = statement_timestamp() + $2::bigint * interval '1 millisecond',
		       next_attempt_at = statement_timestamp() + $2::bigint * interval '1 millisecond'
		 WHERE d.id = ANY ($1::uuid[])
		RETURNING d.id, d.merchant_id, d.environment, d.event, d.body, d.attempts`, pgUUIDs(ids), lease.Milliseconds())
	b.Queue(`COMMIT`)
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, scanClaimed)
	if err != nil {
		return nil, err
	}
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	return out, br.Close()
}

func scanClaimed(row pgx.CollectableRow) (claimed, error) {
	var c claimed
	var env string
	err := row.Scan(&c.ID, &c.MerchantID, &env, &c.Event, &c.Body, &c.Attempt)
	c.Environment = domain.Environment(env)
	return c, err
}

// outcome is the result of one attempt.
type outcome struct {
	ID      uuid.UUID
	Attempt int
	Status  string // delivered, pending (retry later), failed, no_endpoint
	Code    *int32
	Err     *string
	Delay   time.Duration // for pending: pause before the next attempt
	At      time.Time     // when the attempt started
	Took    time.Duration
	// Sent says a request was made, so the attempt is logged; a message
	// without an endpoint was not attempted and gets its attempt back.
	Sent bool
}

// recordOutcomes stores outcomes in one transaction. Each applies only while the
// row is still leased for that attempt (a dispatcher whose lease ran out and
// was taken over changes nothing). It commits asynchronously: losing an
// outcome in a database crash means the message is sent again, which
// at-least-once delivery allows. It reports whether a message with an order
// key finished, which may unblock the next message of that key.
//
// A sent outcome is logged, in the same statement: the delivery row holds
// its last logged attempt, webhook_attempts the ones before it
// (migrations/0009_webhook_last_attempt.sql). An outcome that applies puts
// its attempt on the row and moves the row's previous attempt, if it has
// one (a retry), into webhook_attempts; a first attempt writes nothing
// else. An outcome that does not apply still happened, so it is logged as
// it always was, into webhook_attempts (an earlier attempt than the row's
// claim), unless the row holds that very attempt (the outcome recorded
// twice) or is gone (swept; the foreign key used to fail the whole batch);
// it moves and overwrites nothing. ON CONFLICT DO NOTHING makes recording
// an outcome again harmless.
//
// Both inserts read the row as it was before the update: every part of a
// statement sees one snapshot. The attempt columns change only with an
// outcome that takes the row out of 'delivering', so a row still leased
// for the attempt when the update locks it had them as the snapshot shows.
func recordOutcomes(ctx context.Context, pool *pgxpool.Pool, outs []outcome) (bool, error) {
	n := len(outs)
	ids, attempts, statuses := make([]uuid.UUID, n), make([]int32, n), make([]string, n)
	codes, errs := make([]*int32, n), make([]*string, n)
	delays, undo := make([]int64, n), make([]int32, n)
	ats, tooks := make([]time.Time, n), make([]int32, n)
	for i, o := range outs {
		ids[i], attempts[i], statuses[i] = o.ID, int32(o.Attempt), o.Status
		codes[i], errs[i], delays[i] = o.Code, o.Err, o.Delay.Milliseconds()
		ats[i], tooks[i] = o.At, int32(o.Took.Milliseconds())
		if !o.Sent {
			undo[i] = 1
		}
	}
	// One round trip: the commit setting and the statement go out as one
	// pipeline, which PostgreSQL runs as one implicit transaction. An
	// outcome not sent (undo) gives its attempt back and logs nothing: the
	// row keeps its attempt. When an ordered message finished, other
	// instances' dispatchers may hold its key's next message: the
	// statement notifies them.
	var unblocked bool
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('synchronous_commit', 'off', true)`)
	b.Queue(`
			WITH done AS (
			    UPDATE webhook_deliveries d
			       SET status = r.status, attempts = d.attempts - r.undo,
			           last_status_code = r.code, last_error = r.err, lease_until = NULL,
			           next_attempt_at = CASE WHEN r.status = 'pending'
			                                  THEN now() + r.delay * interval '1 millisecond'
			                                  ELSE d.next_attempt_at END,
			           delivered_at = CASE WHEN r.status = 'delivered' THEN r.at + r.took * interval '1 millisecond'
			                               ELSE d.delivered_at END,
			           finished_at = CASE WHEN r.status IN ('delivered', 'failed', 'no_endpoint')
			                              THEN r.at + r.took * interval '1 millisecond' END,
			           last_attempt = CASE WHEN r.undo = 0 THEN r.attempt ELSE d.last_attempt END,
			           last_attempt_at = CASE WHEN r.undo = 0 THEN r.at ELSE d.last_attempt_at END,
			           last_attempt_status_code = CASE WHEN r.undo = 0 THEN r.code ELSE d.last_attempt_status_code END,
			           last_attempt_error = CASE WHEN r.undo = 0 THEN r.err ELSE d.last_attempt_error END,
			           last_attempt_duration_ms = CASE WHEN r.undo = 0 THEN r.took ELSE d.last_attempt_duration_ms END
			      FROM unnest($1::uuid[], $2::int[], $3::text[], $4::int[], $5::text[], $6::bigint[], $7::int[], $8::timestamptz[], $9::int[])
			           AS r(id, attempt, status, code, err, delay, undo, at, took)
			     WHERE d.id = r.id AND d.status = 'delivering' AND d.attempts = r.attempt
			    RETURNING d.id, r.attempt, r.undo = 0 AS sent, d.order_key IS NOT NULL AS ordered
			), moved AS (
			    INSERT INTO webhook_attempts (delivery_id, attempt, at, status_code, error, duration_ms)
			    SELECT p.id, p.last_attempt, p.last_attempt_at, p.last_attempt_status_code, p.last_attempt_error, p.last_attempt_duration_ms
			      FROM done JOIN webhook_deliveries p ON p.id = done.id
			     WHERE done.sent AND p.last_attempt IS NOT NULL
			    ON CONFLICT DO NOTHING
			), stale AS (
			    INSERT INTO webhook_attempts (delivery_id, attempt, at, status_code, error, duration_ms)
			    SELECT r.id, r.attempt, r.at, r.code, r.err, r.took
			      FROM unnest($1::uuid[], $2::int[], $4::int[], $5::text[], $7::int[], $8::timestamptz[], $9::int[])
			           AS r(id, attempt, code, err, undo, at, took)
			      JOIN webhook_deliveries p ON p.id = r.id
			     WHERE r.undo = 0 AND (r.id, r.attempt) NOT IN (SELECT id, attempt FROM done)
			       AND p.last_attempt IS DISTINCT FROM r.attempt
			    ON CONFLICT DO NOTHING
			)
			SELECT u.unblocked, (SELECT count(*) FROM (SELECT pg_notify($10, '') WHERE u.unblocked) n)
			  FROM (SELECT coalesce(bool_or(ordered), false) AS unblocked FROM done) u`,
		pgUUIDs(ids), attempts, statuses, codes, errs, delays, undo, ats, tooks, notifyChannel,
	).QueryRow(func(row pgx.Row) error {
		var notified int64
		return row.Scan(&unblocked, &notified)
	})
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		return false, err
	}
	return unblocked, nil
}

// release returns attempts abandoned at shutdown to the queue at once
// (instead of waiting for their lease to end). The request may have reached
// the receiver, so the attempt still counts. It notifies the dispatchers
// when it returned any: the one releasing is stopping, and the others
// would otherwise find them only at their next poll.
func release(ctx context.Context, pool *pgxpool.Pool, cs []claimed) error {
	if len(cs) == 0 {
		return nil
	}
	ids, attempts := make([]uuid.UUID, len(cs)), make([]int32, len(cs))
	for i, c := range cs {
		ids[i], attempts[i] = c.ID, int32(c.Attempt)
	}
	_, err := pool.Exec(ctx, `
		WITH back AS (
		    UPDATE webhook_deliveries d
		       SET status = 'pending', next_attempt_at = now(), lease_until = NULL
		      FROM unnest($1::uuid[], $2::int[]) AS r(id, attempt)
		     WHERE d.id = r.id AND d.status = 'delivering' AND d.attempts = r.attempt
		    RETURNING d.id
		)
		SELECT pg_notify($3, '') WHERE EXISTS (SELECT 1 FROM back)`, pgUUIDs(ids), attempts, notifyChannel)
	return err
}

// pgUUIDs is ids as pgx encodes them directly. It encodes a uuid.UUID
// through its driver.Valuer: a string it then parses back, which cost about
// 8% of the webhook benchmark's Go time.
func pgUUIDs(ids []uuid.UUID) []pgtype.UUID {
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		out[i] = pgtype.UUID{Bytes: id, Valid: true}
	}
	return out
}
