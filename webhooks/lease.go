// Leasing due deliveries: a window of the outbox, chosen within each
// merchant's room and leased to one dispatcher for one attempt.

package webhooks

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/domain"
)

// leasedAttempt is a delivery a dispatcher leased for one attempt.
type leasedAttempt struct {
	ID          uuid.UUID
	MerchantID  string
	Environment domain.Environment
	Event       string
	Body        []byte
	Attempt     int
}

// leaseDue leases up to n (> 0) due deliveries for one attempt each, in due
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
// the window holds, so a lease costs the same however many merchants the
// dispatcher remembers. The lease commits synchronously (unlike outcomes):
// its attempt number must survive a database crash, or the next lease
// would reuse it.
//
// starved says the lease may have left due rows for want of room: the
// window left a merchant out (it showed no room, or its room ran out
// there). Merchants full from the start do not count: an attempt of theirs
// that ends wakes the dispatcher anyway (freesRoom), and counting them made
// every lease starved while any merchant was at its cap.
func leaseDue(ctx context.Context, pool *pgxpool.Pool, n int, lease time.Duration, full []string, rooms func(map[string]int) map[string]int) (got []leasedAttempt, starved bool, err error) {
	return leaseDueReporting(ctx, pool, n, lease, full, rooms, nil)
}

// leaseDueReporting is leaseDue that also tells picked (when not nil) how many
// rows it picked per merchant, once it has chosen them and before it
// leases them.
func leaseDueReporting(ctx context.Context, pool *pgxpool.Pool, n int, lease time.Duration, full []string,
	rooms func(map[string]int) map[string]int, picked func(map[string]int)) (got []leasedAttempt, starved bool, err error) {
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

// candidate is a due row of a lease's window.
type candidate struct {
	ID         uuid.UUID
	MerchantID string
	Due        time.Time // next_attempt_at
	Seq        int64
}

// window is the part of the outbox a lease looks at, and the rows it picks
// there. It is read in due order, by selects of up to size rows each (4n,
// at most 1,000: further than n, so that rows the lease cannot take do not
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

// newWindow is the window of a lease of n rows; full are merchants known
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
// the lease's transaction in the same round trip.
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

// leasePicked leases the rows picked, as the lease's attempt, and commits
// in the same round trip. With none picked it rolls back instead: there is
// nothing to keep, so nothing to wait for.
func leasePicked(ctx context.Context, conn *pgx.Conn, ids []uuid.UUID, lease time.Duration) ([]leasedAttempt, error) {
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
	out, err := pgx.CollectRows(rows, scanLeased)
	if err != nil {
		return nil, err
	}
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	return out, br.Close()
}

func scanLeased(row pgx.CollectableRow) (leasedAttempt, error) {
	var c leasedAttempt
	var env string
	err := row.Scan(&c.ID, &c.MerchantID, &env, &c.Event, &c.Body, &c.Attempt)
	c.Environment = domain.Environment(env)
	return c, err
}
