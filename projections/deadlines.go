package projections

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/projector"
)

// DeadlinesName is the deadlines read model's stored name.
const DeadlinesName = "deadlines"

// Deadlines keeps the table of escrows' pending deadlines: one row per
// deadline an event started (an expiring link's creation, an auto-release
// escrow's payment and any payment's window-ending reminder, moved by the
// buyer's window extension; a milestone escrow's next milestone-due
// reminder, moved by each reminder and release), removed by the event
// that ends it (the payment of an expiring link, any settlement, a
// dispute, a deletion). The scheduler
// reads only the rows due, by the index on due_at, so acting on deadlines
// costs what is due, never a pass over the escrows.
//
// leased_until is the scheduler's: a row it has taken is not taken again
// before then, by it or by another process (ClaimDueDeadlines). A row the
// projector writes again starts without a lease.
type Deadlines struct{}

func (Deadlines) StreamPrefixes() []string { return []string{"escrow-"} }
func (Deadlines) Name() string             { return DeadlinesName }
func (Deadlines) Tables() []string         { return []string{"rm_escrow_deadlines"} }
func (Deadlines) Schema() string {
	return `
CREATE TABLE IF NOT EXISTS rm_escrow_deadlines (
    escrow_id    text NOT NULL,
    kind         text NOT NULL,
    merchant_id  text NOT NULL,
    environment  text NOT NULL,
    due_at       timestamptz NOT NULL,
    leased_until timestamptz,
    attempts     int NOT NULL DEFAULT 0,
    PRIMARY KEY (escrow_id, kind)
);
CREATE INDEX IF NOT EXISTS rm_escrow_deadlines_due ON rm_escrow_deadlines (due_at);`
}

// upsertDeadline (re)starts a deadline of an escrow.
const upsertDeadline = `INSERT INTO rm_escrow_deadlines (escrow_id, kind, merchant_id, environment, due_at)
	VALUES ($1, $2, $3, $4, $5)
	ON CONFLICT (escrow_id, kind) DO UPDATE SET merchant_id = excluded.merchant_id, environment = excluded.environment,
	due_at = excluded.due_at, leased_until = NULL, attempts = 0`

// The batch's writes: the escrows whose every deadline ended, the single
// deadlines that ended, and the deadlines (re)started, in that order.
const (
	clearDeadlinesSQL = `DELETE FROM rm_escrow_deadlines WHERE escrow_id = ANY ($1::text[])`
	endDeadlinesSQL   = `DELETE FROM rm_escrow_deadlines d USING unnest($1::text[], $2::text[]) AS x(id, kind)
	WHERE d.escrow_id = x.id AND d.kind = x.kind`
	startDeadlinesSQL = `INSERT INTO rm_escrow_deadlines (escrow_id, kind, merchant_id, environment, due_at)
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[])
	ON CONFLICT (escrow_id, kind) DO UPDATE SET merchant_id = excluded.merchant_id, environment = excluded.environment,
	due_at = excluded.due_at, leased_until = NULL, attempts = 0`
)

func (d Deadlines) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error {
	return projector.ApplyPlan(ctx, d, tx, events)
}

// Plan folds the batch into what it leaves of each deadline it touches
// and queues at most three statements for all of them, whatever the
// batch's length: a deadline started and ended within the batch is not
// written at all.
func (Deadlines) Plan(_ context.Context, _ Querier, events []eventstore.RecordedEvent, b *pgx.Batch) (func(), error) {
	var f deadlineFold
	for _, re := range events {
		id, ok := strings.CutPrefix(re.Stream, "escrow-")
		if !ok {
			continue
		}
		if err := f.apply(re, id); err != nil {
			return nil, err
		}
	}
	f.queue(b)
	return nil, nil
}

// deadlineFold is what a batch's events leave of the deadlines of the
// escrows they touch, in the order the escrows first appear.
type deadlineFold struct {
	escrows map[string]*escrowDeadlines
	order   []string
}

// escrowDeadlines is one escrow's part of a fold: cleared when an event
// ended all its deadlines, then what later events did to each kind (nil:
// ended).
type escrowDeadlines struct {
	cleared bool
	kinds   map[escrow.DeadlineKind]*pendingDeadline
}

type pendingDeadline struct {
	merchantID, environment string
	due                     time.Time
}

func (f *deadlineFold) of(id string) *escrowDeadlines {
	if f.escrows == nil {
		f.escrows = map[string]*escrowDeadlines{}
	}
	e, ok := f.escrows[id]
	if !ok {
		e = &escrowDeadlines{kinds: map[escrow.DeadlineKind]*pendingDeadline{}}
		f.escrows[id] = e
		f.order = append(f.order, id)
	}
	return e
}

func (f *deadlineFold) start(id string, kind escrow.DeadlineKind, merchantID, environment string, at time.Time) {
	f.of(id).kinds[kind] = &pendingDeadline{merchantID: merchantID, environment: environment, due: at}
}

// startFromMeta starts a deadline of an escrow whose event does not name
// its merchant: the metadata of the event does.
func (f *deadlineFold) startFromMeta(re eventstore.RecordedEvent, id string, kind escrow.DeadlineKind, at time.Time) error {
	m, env, ok := eventstore.TenantOf(re.Metadata)
	if !ok {
		return fmt.Errorf("deadlines: %s of escrow %s names no merchant in its metadata", re.Type, id)
	}
	f.start(id, kind, m, env, at)
	return nil
}

func (f *deadlineFold) end(id string, kind escrow.DeadlineKind) { f.of(id).kinds[kind] = nil }

func (f *deadlineFold) clear(id string) {
	e := f.of(id)
	e.cleared = true
	clear(e.kinds)
}

// apply folds in one event of escrow id.
func (f *deadlineFold) apply(re eventstore.RecordedEvent, id string) error {
	decode := func() (domain.Event, error) { return escrow.Registry.Decode(re.Type, re.Data) }
	switch re.Type {
	case escrow.Created{}.EventType():
		ev, err := decode()
		if err != nil {
			return err
		}
		if c := ev.(escrow.Created); !c.ExpiresAt.IsZero() {
			f.start(id, escrow.ExpiryDeadline, c.MerchantID, string(c.Environment), c.ExpiresAt)
		}
	case escrow.Funded{}.EventType():
		ev, err := decode()
		if err != nil {
			return err
		}
		f.end(id, escrow.ExpiryDeadline)
		// The escrow's merchant and environment come with the metadata
		// every escrow event carries.
		fd := ev.(escrow.Funded)
		for _, d := range []struct {
			kind escrow.DeadlineKind
			at   time.Time
		}{{escrow.AutoReleaseDeadline, fd.ReleaseAt}, {escrow.WindowEndingDeadline, fd.RemindAt}, {escrow.MilestoneDueDeadline, fd.MilestoneDueAt}} {
			if !d.at.IsZero() {
				if err := f.startFromMeta(re, id, d.kind, d.at); err != nil {
					return err
				}
			}
		}
	case escrow.WindowExtended{}.EventType():
		ev, err := decode()
		if err != nil {
			return err
		}
		w := ev.(escrow.WindowExtended)
		if !w.ReleaseAt.IsZero() {
			if err := f.startFromMeta(re, id, escrow.AutoReleaseDeadline, w.ReleaseAt); err != nil {
				return err
			}
		}
		if !w.RemindAt.IsZero() {
			return f.startFromMeta(re, id, escrow.WindowEndingDeadline, w.RemindAt)
		}
	case escrow.Reminded{}.EventType():
		ev, err := decode()
		if err != nil {
			return err
		}
		r := ev.(escrow.Reminded)
		f.end(id, r.Reminder)
		if r.Reminder == escrow.MilestoneDueDeadline && !r.NextDueAt.IsZero() {
			return f.startFromMeta(re, id, escrow.MilestoneDueDeadline, r.NextDueAt)
		}
	case escrow.MilestoneConfirmed{}.EventType():
		ev, err := decode()
		if err != nil {
			return err
		}
		f.clear(id)
		if m := ev.(escrow.MilestoneConfirmed); !m.MilestoneDueAt.IsZero() {
			return f.startFromMeta(re, id, escrow.MilestoneDueDeadline, m.MilestoneDueAt)
		}
	case escrow.Released{}.EventType(), escrow.Deleted{}.EventType(), escrow.DisputeSubmitted{}.EventType(),
		escrow.DisputeResolved{}.EventType(), escrow.VaultSettled{}.EventType():
		f.clear(id)
	}
	return nil
}

// queue queues the fold's statements on b, each escrow's rows in the order
// the escrows first appeared and their kinds sorted, so that two appliers
// lock rows in one order.
func (f *deadlineFold) queue(b *pgx.Batch) {
	var (
		cleared                               []string
		endIDs, endKinds                      []string
		startIDs, startKinds, merchants, envs []string
		dues                                  []time.Time
	)
	for _, id := range f.order {
		e := f.escrows[id]
		if e.cleared {
			cleared = append(cleared, id)
		}
		kinds := make([]escrow.DeadlineKind, 0, len(e.kinds))
		for k := range e.kinds {
			kinds = append(kinds, k)
		}
		slices.Sort(kinds)
		for _, k := range kinds {
			d := e.kinds[k]
			switch {
			case d != nil:
				startIDs, startKinds = append(startIDs, id), append(startKinds, string(k))
				merchants, envs, dues = append(merchants, d.merchantID), append(envs, d.environment), append(dues, d.due)
			case !e.cleared:
				endIDs, endKinds = append(endIDs, id), append(endKinds, string(k))
			}
		}
	}
	if len(cleared) > 0 {
		b.Queue(clearDeadlinesSQL, cleared)
	}
	if len(endIDs) > 0 {
		b.Queue(endDeadlinesSQL, endIDs, endKinds)
	}
	if len(startIDs) > 0 {
		b.Queue(startDeadlinesSQL, startIDs, startKinds, merchants, envs, dues)
	}
}

// Deadline is a pending deadline the scheduler has taken.
type Deadline struct {
	EscrowID    string
	Kind        escrow.DeadlineKind
	MerchantID  string
	Environment domain.Environment
	DueAt       time.Time
	Attempts    int
}

// ClaimDueDeadlines takes up to limit deadlines due at now that no one
// holds, earliest first, and leases them until now + lease: another process
// asking meanwhile skips them (FOR UPDATE SKIP LOCKED, then the lease), so
// instances share the work instead of doing it twice. The lease only
// spares work: what makes a deadline act once is the command's expected
// revision on the escrow's stream.
func (q *Queries) ClaimDueDeadlines(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]Deadline, error) {
	// RETURNING keeps no order: the deadlines are acted on in the order
	// they fell due (a late process reminds before it releases).
	rows, err := q.pool.Query(ctx, `WITH taken AS (
		UPDATE rm_escrow_deadlines d SET leased_until = $2, attempts = d.attempts + 1
		FROM (SELECT escrow_id, kind FROM rm_escrow_deadlines
		      WHERE due_at <= $1 AND (leased_until IS NULL OR leased_until <= $1)
		      ORDER BY due_at LIMIT $3 FOR UPDATE SKIP LOCKED) due
		WHERE d.escrow_id = due.escrow_id AND d.kind = due.kind
		RETURNING d.escrow_id, d.kind, d.merchant_id, d.environment, d.due_at, d.attempts)
		SELECT * FROM taken ORDER BY due_at, escrow_id, kind`,
		now, now.Add(lease), limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Deadline, error) {
		var d Deadline
		var kind, env string
		err := r.Scan(&d.EscrowID, &kind, &d.MerchantID, &env, &d.DueAt, &d.Attempts)
		d.Kind, d.Environment = escrow.DeadlineKind(kind), domain.Environment(env)
		return d, err
	})
}

// ForgetDeadline removes a deadline the scheduler has acted on (or found
// the escrow past), unless the projector has since moved or written it
// again: a row it writes starts without a lease, so one that is not leased
// is not the one taken (the next milestone's reminder, due at the same
// time as the one just sent).
func (q *Queries) ForgetDeadline(ctx context.Context, d Deadline) error {
	_, err := q.pool.Exec(ctx, `DELETE FROM rm_escrow_deadlines
		WHERE escrow_id = $1 AND kind = $2 AND due_at = $3 AND leased_until IS NOT NULL`,
		d.EscrowID, string(d.Kind), d.DueAt)
	return err
}

// NextDeadlineAt is when the earliest pending deadline is due (ok false
// when none is).
func (q *Queries) NextDeadlineAt(ctx context.Context) (time.Time, bool, error) {
	var at *time.Time
	if err := q.pool.QueryRow(ctx, `SELECT min(due_at) FROM rm_escrow_deadlines`).Scan(&at); err != nil || at == nil {
		return time.Time{}, false, err
	}
	return *at, true, nil
}
