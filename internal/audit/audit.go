// Package audit checks one merchant's money against the event log. It
// replays the whole global log, re-derives the merchant's balances and
// transaction records from its ledger entries (the only source of truth),
// checks the ledger's invariants at every step, and compares the result with
// the read models (rm_balances, rm_transactions) and with the customers'
// wallet streams. The read models are never trusted: a difference between
// them and the replay is reported, not repaired.
package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"

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
	// Events is the number of events of the global log replayed.
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
	// events replayed so far and the number to replay (0 when the store
	// cannot count them cheaply).
	Progress func(done, total int64)
	// Log receives the catch-up's messages; nil discards them.
	Log *zap.Logger
	// At is a position the audit must cover (a write's own position),
	// waiting for it to become readable. By default the audit covers the
	// log's head as of the call: an event is readable only once every
	// older write transaction has ended, so the head can be short of a
	// write that has just returned.
	At eventstore.Position
}

// replayPage is the number of events read per ReadAll call.
const replayPage = 2000

// Run audits merchantID: see RunWith.
func Run(ctx context.Context, store eventstore.Store, pool *pgxpool.Pool, merchantID string) (Report, error) {
	return RunWith(ctx, store, pool, merchantID, Options{})
}

// RunWith first catches every read model up with the log (so a lagging read
// model is not reported as a corruption), takes one consistent snapshot of
// the merchant's read-model rows and of the ledger read model's checkpoint,
// then replays the global log up to that checkpoint and compares. An error
// means the audit could not run; differences are in the report.
func RunWith(ctx context.Context, store eventstore.Store, pool *pgxpool.Pool, merchantID string, opts Options) (Report, error) {
	rep := Report{MerchantID: merchantID, Differences: []Difference{}}
	if merchantID == "" {
		return rep, errors.New("audit: no merchant id")
	}
	known, err := store.ReadStream(ctx, app.MerchantKind.StreamName(merchantID), 0, 1)
	if err != nil {
		return rep, err
	}
	if len(known) == 0 {
		return rep, fmt.Errorf("%w: %s", ErrUnknownMerchant, merchantID)
	}
	if err := projections.CatchUpTo(ctx, store, pool, opts.Log, opts.At, projections.All()...); err != nil {
		return rep, fmt.Errorf("audit: catch up read models: %w", err)
	}
	rm, err := loadReadModel(ctx, pool, merchantID)
	if err != nil {
		return rep, fmt.Errorf("audit: read models: %w", err)
	}
	rep.Position = rm.position
	var total int64
	if c, ok := store.(projections.EventCounter); ok {
		if total, err = c.CountEvents(ctx, eventstore.Start, rm.position, 0); err != nil {
			return rep, err
		}
	}
	r := newReplay(merchantID)
	after := eventstore.Start
	for after.Less(rm.position) {
		events, err := store.ReadAll(ctx, after, replayPage)
		if err != nil {
			return rep, err
		}
		if len(events) == 0 {
			// The projector read every event up to its checkpoint, so
			// they are all committed: the log cannot end before it.
			return rep, fmt.Errorf("audit: the log ends at %s, before the ledger checkpoint %s", after, rm.position)
		}
		for _, re := range events {
			if rm.position.Less(re.Position) {
				break
			}
			r.apply(re)
		}
		if opts.Progress != nil {
			opts.Progress(r.events, total)
		}
		after = events[len(events)-1].Position
	}
	r.finish()
	rm.compare(r)
	rep.Events, rep.Entries, rep.Movements = r.events, r.entries, r.movements
	rep.Records, rep.Accounts, rep.Wallets = len(r.records), len(r.balances), len(r.customers)
	rep.Differences = append(rep.Differences, r.diffs...)
	return rep, nil
}
