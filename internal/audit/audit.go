// Package audit checks one merchant's money against the event log. It
// replays the merchant's events (read through the store's tenant index,
// a page at a time), re-derives the merchant's balances and
// transaction records from its ledger entries (the only source of truth),
// checks the ledger's invariants at every step, and compares the result with
// the read models (rm_balances, rm_transactions) and with the customers'
// wallet streams. The read models are never trusted: a difference between
// them and the replay is reported, not repaired.
package audit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/projections"
)

// Check names the invariant a difference breaks.
type Check string

const (
	// CheckEvent: an event of the merchant cannot be decoded, or one ledger
	// entry mixes the merchant's money with another merchant's.
	CheckEvent Check = "event"
	// CheckMovement: a movement does not validate, its postings do not sum
	// to zero, or the sum over the merchant's accounts of an environment is
	// not zero after it.
	CheckMovement Check = "movement"
	// CheckNegative: an account other than external clearing went below zero.
	CheckNegative Check = "negative"
	// CheckSettledOnce: a transaction record changed after it had settled.
	CheckSettledOnce Check = "settled_once"
	// CheckRecord: rm_transactions differs from the replayed records.
	CheckRecord Check = "record"
	// CheckBalance: rm_balances differs from the balances the postings give.
	CheckBalance Check = "balance"
	// CheckWallet: a customer's wallet stream differs from the balances the
	// postings give.
	CheckWallet Check = "wallet"
	// CheckCommission: an escrow was charged commission more than once.
	CheckCommission Check = "commission"
)

// Difference is one broken invariant. Amounts in Expected and Found are
// naira (money.Amount's String); record fields are their JSON values.
type Difference struct {
	Check Check `json:"check"`
	// Position is the event where a replay-time check failed.
	Position    *eventstore.Position `json:"position,omitempty"`
	Environment domain.Environment   `json:"environment,omitempty"`
	Account     string               `json:"account,omitempty"`
	RecordID    string               `json:"recordId,omitempty"`
	CustomerID  string               `json:"customerId,omitempty"`
	EscrowID    string               `json:"escrowId,omitempty"`
	Field       string               `json:"field,omitempty"`
	Expected    string               `json:"expected,omitempty"`
	Found       string               `json:"found,omitempty"`
	Detail      string               `json:"detail,omitempty"`
}

// String renders the difference as one line naming what differs.
func (d Difference) String() string {
	var b strings.Builder
	b.WriteString(string(d.Check))
	if d.Environment != "" {
		b.WriteString(" " + string(d.Environment))
	}
	switch {
	case d.Account != "":
		b.WriteString(" " + d.Account)
	case d.RecordID != "":
		b.WriteString(" record " + d.RecordID)
	case d.EscrowID != "":
		b.WriteString(" escrow " + d.EscrowID)
	case d.CustomerID != "":
		b.WriteString(" customer " + d.CustomerID)
	}
	if d.Field != "" {
		b.WriteString(" " + d.Field)
	}
	if d.Position != nil {
		b.WriteString(" at " + d.Position.String())
	}
	b.WriteString(":")
	if d.Expected != "" || d.Found != "" {
		fmt.Fprintf(&b, " expected %s, found %s", orNone(d.Expected), orNone(d.Found))
		if d.Detail != "" {
			b.WriteString(" (" + d.Detail + ")")
		}
	} else if d.Detail != "" {
		b.WriteString(" " + d.Detail)
	}
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// Report is the outcome of an audit.
type Report struct {
	MerchantID string `json:"merchantId"`
	// Position is where the replay stopped: the ledger read model's
	// checkpoint, so replay and read model describe the same events.
	Position eventstore.Position `json:"position"`
	// Events is the number of the merchant's events replayed (those whose
	// metadata names it, in either environment).
	Events int64 `json:"events"`
	// Entries is the number of the merchant's ledger entries among them.
	Entries int64 `json:"entries"`
	// Movements is the number of the merchant's money movements.
	Movements int64 `json:"movements"`
	// Records is the number of distinct transaction records.
	Records int `json:"records"`
	// Accounts is the number of accounts (per environment) the postings touch.
	Accounts int `json:"accounts"`
	// Wallets is the number of customer wallet streams compared.
	Wallets     int          `json:"wallets"`
	Differences []Difference `json:"differences"`
}

// Clean reports whether the audit found no difference.
func (r Report) Clean() bool { return len(r.Differences) == 0 }

// ErrUnknownMerchant is returned for a merchant id that names no merchant.
var ErrUnknownMerchant = errors.New("audit: merchant not found")

// Options tune RunWith.
type Options struct {
	// Progress, if set, is called after every page of the replay with the
	// events replayed so far and an estimate of the number to replay (the
	// count of the merchant's events the audit trail read model keeps).
	Progress func(done, total int64)
	// Log receives the catch-up's messages; nil discards them.
	Log *zap.Logger
	// At is a position the audit must cover (a write's own position),
	// waiting for it to become readable. By default the audit covers the
	// log's head as of the call: an event is readable only once every
	// older write transaction has ended, so the head can be short of a
	// write that has just returned.
	At eventstore.Position
	// PageSize is the number of events read and folded at a time; 0 is
	// 2,000.
	PageSize int
}

// sealerOf is the sealer of store's codec (nil without one): the read
// models' (see projections.All), which the catch-up's projectors seal
// with and the comparison opens with.
func sealerOf(store eventstore.Store) domain.Sealer {
	if s, ok := store.(interface{ Sealer() domain.Sealer }); ok {
		return s.Sealer()
	}
	return nil
}

// replayPage is the default Options.PageSize.
const replayPage = 2000

// Run audits merchantID: see RunWith.
func Run(ctx context.Context, store eventstore.Store, pool *pgxpool.Pool, merchantID string) (Report, error) {
	return RunWith(ctx, store, pool, merchantID, Options{})
}

// RunWith first catches every read model up with the log (so a lagging read
// model is not reported as a corruption), opens one repeatable-read
// snapshot of the read models and reads the ledger read model's
// checkpoint and the merchant's balances in it, then replays the
// merchant's events (both environments, in log order) up to that
// checkpoint and compares, reading the merchant's transaction records in
// the same snapshot. The snapshot stays open through the replay; it is
// read-only, so it holds back no event (the store's horizon counts only
// transactions that write). An error means the audit could not run;
// differences are in the report.
//
// Memory is bounded by the accounts the merchant's money touches, not by
// its history: events are read a page at a time (eventstore.ReadTenant)
// and the transaction records are folded into a temporary table (records).
func RunWith(ctx context.Context, store eventstore.Store, pool *pgxpool.Pool, merchantID string, opts Options) (Report, error) {
	rep := Report{MerchantID: merchantID, Differences: []Difference{}}
	if merchantID == "" {
		return rep, errors.New("audit: no merchant id")
	}
	known, err := store.ReadStream(ctx, app.MerchantKind.StreamName(merchantID), 0, 1)
	if err != nil {
		return rep, fmt.Errorf("audit: read the merchant: %w", err)
	}
	if len(known) == 0 {
		return rep, fmt.Errorf("%w: %s", ErrUnknownMerchant, merchantID)
	}
	if err := projections.CatchUpTo(ctx, store, pool, opts.Log, opts.At, projections.All(sealerOf(store))...); err != nil {
		return rep, fmt.Errorf("audit: catch up read models: %w", err)
	}
	snap, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return rep, fmt.Errorf("audit: read models' snapshot: %w", err)
	}
	defer func() { _ = snap.Rollback(context.WithoutCancel(ctx)) }()
	rm, err := loadReadModel(ctx, snap, merchantID)
	if err != nil {
		return rep, fmt.Errorf("audit: read models: %w", err)
	}
	rep.Position = rm.position

	conn, err := pool.Acquire(ctx)
	if err != nil {
		return rep, fmt.Errorf("audit: records connection: %w", err)
	}
	defer conn.Release()
	recs, err := newRecords(ctx, conn.Conn())
	if err != nil {
		return rep, fmt.Errorf("audit: records table: %w", err)
	}
	recs.open = projections.NewQueries(pool, sealerOf(store)).OpenRecord
	defer func() {
		if err := recs.drop(context.WithoutCancel(ctx)); err != nil {
			_ = conn.Conn().Close(context.WithoutCancel(ctx)) // never pool a connection with the table
		}
	}()

	// The number to replay, for a progress report only, is the audit
	// trail's count of the merchant's events (GET /v1/events' total),
	// caught up above: counting them in the log would read the whole
	// history once more before the replay starts. It is an estimate (the
	// replay stops at the ledger's checkpoint, and the read model is not
	// what the audit trusts); the report counts what was replayed.
	var total int64
	if opts.Progress != nil {
		q := projections.NewQueries(pool, sealerOf(store))
		for _, env := range []domain.Environment{domain.Test, domain.Live} {
			n, _, err := q.AuditPage(ctx, merchantID, env, "", 0)
			if err != nil {
				return rep, fmt.Errorf("audit: count the events: %w", err)
			}
			total += n
		}
	}
	r := newReplay(merchantID)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The records are folded by a goroutine of their own, a page behind
	// the replay, so that its round trips overlap the decoding; its
	// differences (settled once) join the replay's after it.
	var folded []Difference
	folds := make(chan []recordWrite, 1)
	foldErr := make(chan error, 1)
	go func() {
		var err error
		for writes := range folds {
			if err == nil {
				err = recs.fold(rctx, writes, func(d Difference) { folded = append(folded, d) })
				if err != nil {
					cancel()
				}
			}
		}
		if err == nil && rctx.Err() == nil {
			err = recs.finish(rctx)
		}
		foldErr <- err
	}()
	page := cmp.Or(opts.PageSize, replayPage)
	events := mergeTenants(rctx, store, merchantID, rm.position, page)
	err = func() error {
		defer close(folds)
		for p := range events {
			if p.err != nil {
				return fmt.Errorf("audit: read the log: %w", p.err)
			}
			for _, re := range p.events {
				r.apply(re)
			}
			if len(r.writes) > 0 {
				select {
				case folds <- r.writes:
				case <-rctx.Done():
					return rctx.Err()
				}
				r.writes = nil
			}
			if opts.Progress != nil {
				opts.Progress(r.events, max(total, r.events))
			}
		}
		// The readers stop without a word when the context ends: a
		// replay cut short must not pass for a whole one.
		return rctx.Err()
	}()
	if ferr := <-foldErr; ferr != nil {
		return rep, fmt.Errorf("audit: records: %w", ferr)
	}
	if err != nil {
		return rep, err
	}
	// Replay-time differences in log order: at one event, the records'
	// come after its other checks, as the replay made them.
	r.diffs = append(r.diffs, folded...)
	slices.SortStableFunc(r.diffs, func(a, b Difference) int {
		switch {
		case a.Position.Less(*b.Position):
			return -1
		case b.Position.Less(*a.Position):
			return 1
		}
		return 0
	})
	if err := recs.checkCommission(ctx, r.report); err != nil {
		return rep, fmt.Errorf("audit: commission: %w", err)
	}
	r.checkWallets()
	rm.compareBalances(r)
	// At Start nothing is projected, and a starting runner creates the
	// checkpoint row before the tables (see loadReadModel): no rows to
	// compare, and no records replayed either.
	if rm.position != eventstore.Start {
		if err := recs.compareRecords(ctx, snap, merchantID, r.report); err != nil {
			return rep, fmt.Errorf("audit: records: %w", err)
		}
	}
	rep.Events, rep.Entries, rep.Movements = r.events, r.entries, r.movements
	rep.Records, rep.Accounts, rep.Wallets = int(recs.count), len(r.balances), len(r.customers)
	rep.Differences = append(rep.Differences, r.diffs...)
	return rep, nil
}

// tenantPage is a page of the merchant's events, in log order.
type tenantPage struct {
	events []eventstore.RecordedEvent
	err    error
}

// mergeTenants reads the merchant's events of both environments up to
// position upTo, each a page ahead of the replay, and sends them merged in
// log order, a page at a time. The projector read every event up to its
// checkpoint, so they are all committed and readable.
func mergeTenants(ctx context.Context, store eventstore.Store, merchantID string, upTo eventstore.Position, size int) <-chan tenantPage {
	out := make(chan tenantPage, 1)
	envs := []domain.Environment{domain.Test, domain.Live}
	feeds := make([]<-chan tenantPage, len(envs))
	for i, env := range envs {
		feeds[i] = readTenant(ctx, store, eventstore.TenantFilter{MerchantID: merchantID, Environment: string(env)}, upTo, size)
	}
	go func() {
		defer close(out)
		send := func(p tenantPage) bool {
			select {
			case out <- p:
				return true
			case <-ctx.Done():
				return false
			}
		}
		heads := make([][]eventstore.RecordedEvent, len(feeds))
		open := make([]bool, len(feeds))
		for i := range open {
			open[i] = true
		}
		// fill makes sure feed i has an event at hand, unless it has ended.
		fill := func(i int) error {
			for open[i] && len(heads[i]) == 0 {
				p, ok := <-feeds[i]
				if !ok {
					open[i] = false
					return nil
				}
				if p.err != nil {
					return p.err
				}
				heads[i] = p.events
			}
			return nil
		}
		var page []eventstore.RecordedEvent
		for {
			next := -1
			for i := range feeds {
				if err := fill(i); err != nil {
					send(tenantPage{err: err})
					return
				}
				if len(heads[i]) > 0 && (next < 0 || heads[i][0].Position.Less(heads[next][0].Position)) {
					next = i
				}
			}
			if next < 0 {
				break
			}
			page = append(page, heads[next][0])
			heads[next] = heads[next][1:]
			if len(page) == size {
				if !send(tenantPage{events: page}) {
					return
				}
				page = nil
			}
		}
		if len(page) > 0 {
			send(tenantPage{events: page})
		}
	}()
	return out
}

// readTenant sends the pages of one tenant's events up to upTo.
func readTenant(ctx context.Context, store eventstore.Store, f eventstore.TenantFilter, upTo eventstore.Position, size int) <-chan tenantPage {
	out := make(chan tenantPage, 1)
	go func() {
		defer close(out)
		after := eventstore.Start
		for after.Less(upTo) {
			events, err := eventstore.ReadTenant(ctx, store, f, after, 0, size)
			if err != nil {
				select {
				case out <- tenantPage{err: err}:
				case <-ctx.Done():
				}
				return
			}
			n := len(events)
			for n > 0 && upTo.Less(events[n-1].Position) {
				n--
			}
			if n > 0 {
				select {
				case out <- tenantPage{events: events[:n]}:
				case <-ctx.Done():
					return
				}
			}
			if n < len(events) || len(events) < size {
				return
			}
			after = events[n-1].Position
		}
	}()
	return out
}
