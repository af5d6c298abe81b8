// The delivery log a merchant reads and retries through the API.

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
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/webhook"
	"github.com/escrowd/escrowd/view"
)

// Outbox reads and changes deliveries for the API.
type Outbox struct {
	pool *pgxpool.Pool
	// betweenReads runs between the statements of one delivery log read
	// (BetweenReads); nil for none.
	betweenReads func()
}

// OutboxOption tunes an outbox.
type OutboxOption func(*Outbox)

// BetweenReads makes f run between the statements of each delivery log
// read (the rows, their count, their attempts): whatever f commits there
// is not seen by the read, which takes one snapshot (see snapshot).
func BetweenReads(f func()) OutboxOption { return func(o *Outbox) { o.betweenReads = f } }

// snapshot runs the statements of one delivery log read in a read-only
// repeatable-read transaction: the rows, their count and their attempts
// are of one moment, so an outcome recorded meanwhile never shows a
// delivery whose counters and attempt log disagree.
func (o *Outbox) snapshot(ctx context.Context, f func(tx pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, o.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		return f(tx)
	})
}

// between runs the BetweenReads option's function, if any.
func (o *Outbox) between() {
	if o.betweenReads != nil {
		o.betweenReads()
	}
}

// NewOutbox returns the outbox on pool.
func NewOutbox(pool *pgxpool.Pool, opts ...OutboxOption) *Outbox {
	o := &Outbox{pool: pool}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

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
	// EscrowID is the escrow whose event the delivery announces (its
	// order key); "" for a payment's. Not part of the delivery log's JSON.
	EscrowID string `json:"-"`
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
	last_attempt, last_attempt_at, last_attempt_status_code, last_attempt_error, last_attempt_duration_ms, coalesce(order_key, '')`

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
		&d.CreatedAt, &d.DeliveredAt, &num, &at, &a.StatusCode, &a.Error, &took, &d.EscrowID); err != nil {
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

// inFlight is true of a row while an attempt of it runs: a delivering row
// whose lease ran out is abandoned, so it may be redelivered.
const inFlight = `(status = 'delivering' AND lease_until >= now())`

// Redeliverable looks up one of the merchant's deliveries to be delivered
// again by hand, with how many times it was redelivered by hand so far:
// ErrDeliveryNotFound unless it is one of merchantID's deliveries of env,
// ErrDeliveryInProgress while an attempt of it is in flight. The
// redelivery itself is an event (webhook.RedeliveryRequested), which the
// Subscriber acts on; meanwhile the retention must not delete the row, so
// the look-up restarts a finished delivery's retention clock (the sweep
// re-checks a row's finished_at once it holds its lock), unless the
// outbox has queued as many redeliveries of it as the bound allows, so
// requests past the bound do not keep it beyond its retention.
func (o *Outbox) Redeliverable(ctx context.Context, merchantID string, env domain.Environment, id string) (Delivery, int, error) {
	d, err := o.Get(ctx, merchantID, env, id)
	if err != nil {
		return d, 0, err
	}
	var n int
	var busy bool
	err = o.pool.QueryRow(ctx, `UPDATE webhook_deliveries
		SET finished_at = CASE WHEN finished_at IS NULL OR manual_retries >= $4 THEN finished_at ELSE now() END
		WHERE id = $1 AND merchant_id = $2 AND environment = $3
		RETURNING manual_retries, `+inFlight, id, merchantID, string(env), webhook.MaxRedeliveries).Scan(&n, &busy)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return d, 0, ErrDeliveryNotFound // swept away meanwhile
	case err != nil:
		return d, 0, err
	case busy:
		return d, n, ErrDeliveryInProgress
	}
	return d, n, nil
}

// Queued is d as a redelivery asked at at queues it: waiting for an
// attempt due at once.
func (d Delivery) Queued(at time.Time) Delivery {
	at = at.UTC()
	d.Status, d.NextAttemptAt = StatusPending, &at
	return d
}

// redeliverQuery queues delivery $1 for an attempt now, as a redelivery by
// hand: its attempts go on counting (a message that had failed gets one
// more attempt, not a new schedule). An attempt in flight began after the
// request was checked (Redeliverable refuses one in flight), so it is the
// delivery asked for, and the row is left to it. Either way the redelivery
// counts.
const redeliverQuery = `UPDATE webhook_deliveries SET manual_retries = manual_retries + 1,
	next_attempt_at = CASE WHEN ` + inFlight + ` THEN next_attempt_at ELSE now() END,
	finished_at = CASE WHEN ` + inFlight + ` THEN finished_at END,
	lease_until = CASE WHEN ` + inFlight + ` THEN lease_until END,
	status = CASE WHEN ` + inFlight + ` THEN status ELSE 'pending' END
	WHERE id = $1`
