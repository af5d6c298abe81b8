package projections

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/projector"
)

// Ledger builds balances (summed from the postings of every movement) and
// the transaction records customers and merchants read. Both tables live in
// one projector so a record and the balance change it explains are always
// visible together.
type Ledger struct {
	// Sealer seals the records' personal fields (see sealed_records.go).
	Sealer domain.Sealer
}

func (Ledger) StreamPrefixes() []string { return projector.EntryStreamPrefixes() }
func (Ledger) Name() string             { return LedgerName }
func (Ledger) Tables() []string {
	return []string{"rm_balances", "rm_transactions", "rm_payouts_in_flight", transactionsKept.counts}
}
func (Ledger) Schema() string {
	return `
CREATE TABLE IF NOT EXISTS rm_balances (
    merchant_id text NOT NULL,
    environment text NOT NULL,
    holder      text NOT NULL,
    holder_id   text NOT NULL,
    bucket      text NOT NULL,
    balance     bigint NOT NULL,
    PRIMARY KEY (holder_id, bucket, holder, merchant_id, environment)
);
CREATE INDEX IF NOT EXISTS rm_balances_merchant ON rm_balances (merchant_id, environment);
CREATE TABLE IF NOT EXISTS rm_transactions (
    id               text PRIMARY KEY,
    merchant_id      text NOT NULL,
    environment      text NOT NULL,
    customer_id      text,
    reference        text NOT NULL,
    transaction_type text NOT NULL,
    status           text NOT NULL,
    record           json NOT NULL, -- the API record as written, bytes preserved
    created_at       timestamptz NOT NULL,
    seq              bigserial
);
-- Date ranges, as on rm_escrows (docs/listings.md, "Date ranges").
CREATE INDEX IF NOT EXISTS rm_transactions_created ON rm_transactions USING brin (created_at timestamptz_minmax_multi_ops) WITH (pages_per_range = 32, autosummarize = on);
CREATE INDEX IF NOT EXISTS rm_transactions_reference ON rm_transactions (merchant_id, environment, reference);
-- Withdrawals debited and not yet paid out or reversed: what the payout
-- resumer looks at (a pending withdrawal in rm_transactions may also be
-- one staged and never verified, which must not be executed).
CREATE TABLE IF NOT EXISTS rm_payouts_in_flight (
    merchant_id text NOT NULL,
    environment text NOT NULL,
    reference   text NOT NULL,
    debited_at  timestamptz NOT NULL,
    PRIMARY KEY (merchant_id, environment, reference)
);
CREATE INDEX IF NOT EXISTS rm_payouts_in_flight_debited ON rm_payouts_in_flight (debited_at);` + transactionListingDDL()
}

func (l Ledger) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error {
	return projector.ApplyPlan(ctx, l, tx, events)
}

// balanceKey is a row of rm_balances.
type balanceKey struct{ merchant, env, holder, id, bucket string }

// payoutKey is a row of rm_payouts_in_flight.
type payoutKey struct{ merchant, env, ref string }

func payoutKeyOf(r ledger.Record) payoutKey {
	return payoutKey{r.MerchantID, string(r.Environment), r.Reference}
}

// Plan queues the batch's changes as a few statements whatever its size:
// the balance deltas summed per account, the records (the last version of
// each, in the order they first appeared, which is their seq order) and
// the payouts in flight. It reads nothing.
func (l Ledger) Plan(ctx context.Context, _ Querier, events []eventstore.RecordedEvent, b *pgx.Batch) (func(), error) {
	deltas := map[balanceKey]int64{}
	type row struct {
		rec ledger.Record
		doc []byte
	}
	var recs []row
	recIndex := map[string]int{}
	// Payouts that started (true, with the debit's time) or ended (false)
	// in the batch, by their key; the last word counts.
	payouts := map[payoutKey]*time.Time{}
	var payoutOrder []payoutKey
	notePayout := func(r ledger.Record, debited *time.Time) {
		k := payoutKeyOf(r)
		if _, seen := payouts[k]; !seen {
			payoutOrder = append(payoutOrder, k)
		}
		payouts[k] = debited
	}
	for _, re := range events {
		e, ok, err := projector.DecodeEntry(re)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		switch ev := e.(type) {
		case payment.PayoutStarted:
			at := re.RecordedAt
			notePayout(ev.Record, &at)
		case payment.PayoutCompleted:
			notePayout(ev.Record, nil)
		case payment.PayoutFailed:
			notePayout(ev.Record, nil)
		case payment.PayoutReversed:
			notePayout(ev.Record, nil)
		}
		eff := e.Ledger()
		if m := eff.Movement; m != nil {
			for acct, delta := range m.Deltas() {
				deltas[balanceKey{m.MerchantID, string(m.Environment), string(acct.Holder), acct.ID, string(acct.Bucket)}] += delta.Kobo()
			}
		}
		for _, r := range eff.Records {
			doc, err := keptRecord(ctx, l.Sealer, r)
			if err != nil {
				return nil, err
			}
			if i, seen := recIndex[r.ID]; seen {
				recs[i] = row{r, doc}
				continue
			}
			recIndex[r.ID] = len(recs)
			recs = append(recs, row{r, doc})
		}
	}
	if len(deltas) > 0 {
		keys := make([]balanceKey, 0, len(deltas))
		for k := range deltas {
			keys = append(keys, k)
		}
		// One fixed order (the primary key's) keeps concurrent rebuilds and
		// runners from locking rows in different orders.
		sort.Slice(keys, func(i, j int) bool {
			a, b := keys[i], keys[j]
			if a.id != b.id {
				return a.id < b.id
			}
			if a.bucket != b.bucket {
				return a.bucket < b.bucket
			}
			if a.holder != b.holder {
				return a.holder < b.holder
			}
			if a.merchant != b.merchant {
				return a.merchant < b.merchant
			}
			return a.env < b.env
		})
		var merchants, envs, holders, ids, buckets []string
		var amounts []int64
		for _, k := range keys {
			merchants, envs, holders = append(merchants, k.merchant), append(envs, k.env), append(holders, k.holder)
			ids, buckets, amounts = append(ids, k.id), append(buckets, k.bucket), append(amounts, deltas[k])
		}
		b.Queue(`INSERT INTO rm_balances (merchant_id, environment, holder, holder_id, bucket, balance)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[])
			ON CONFLICT (holder_id, bucket, holder, merchant_id, environment)
			DO UPDATE SET balance = rm_balances.balance + excluded.balance`,
			merchants, envs, holders, ids, buckets, amounts)
	}
	if len(recs) > 0 {
		n := len(recs)
		var (
			ids, merchants, envs, refs, types, statuses = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
			customers                                   = make([]*string, n)
			docs                                        = make([]string, n)
			created                                     = make([]time.Time, n)
		)
		for i, x := range recs {
			r := x.rec
			ids[i], merchants[i], envs[i], refs[i] = r.ID, r.MerchantID, string(r.Environment), r.Reference
			types[i], statuses[i], docs[i], created[i] = string(r.Type), string(r.Status), string(x.doc), r.CreatedAt
			if r.CustomerID != "" {
				customers[i] = &recs[i].rec.CustomerID
			}
		}
		b.Queue(transactionChangeSQL, ids, merchants, envs, customers, refs, types, statuses, docs, created)
	}
	if len(payouts) > 0 {
		var merchants, envs, refs []string
		var debited []*time.Time
		for _, k := range payoutOrder {
			merchants, envs, refs = append(merchants, k.merchant), append(envs, k.env), append(refs, k.ref)
			debited = append(debited, payouts[k])
		}
		b.Queue(`DELETE FROM rm_payouts_in_flight p
			USING unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[]) AS x(merchant_id, environment, reference, debited_at)
			WHERE x.debited_at IS NULL
			  AND (p.merchant_id, p.environment, p.reference) = (x.merchant_id, x.environment, x.reference)`,
			merchants, envs, refs, debited)
		b.Queue(`INSERT INTO rm_payouts_in_flight (merchant_id, environment, reference, debited_at)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[]) AS x(merchant_id, environment, reference, debited_at)
			WHERE x.debited_at IS NOT NULL
			ON CONFLICT DO NOTHING`,
			merchants, envs, refs, debited)
	}
	return nil, nil
}

// PayoutInFlight is a withdrawal debited and not yet paid out or reversed.
type PayoutInFlight struct {
	MerchantID  string
	Environment domain.Environment
	Reference   string
	DebitedAt   time.Time
}

// PayoutsInFlight lists up to limit withdrawals debited before before and
// not yet paid out or reversed (as far as the ledger read model has
// seen), oldest first.
func (q *Queries) PayoutsInFlight(ctx context.Context, before time.Time, limit int) ([]PayoutInFlight, error) {
	return q.PayoutsInFlightAfter(ctx, PayoutInFlight{}, before, limit)
}

// PayoutsInFlightAfter is PayoutsInFlight for the page after after (the
// last row of the previous page; the zero value for the first): rows are
// ordered by debit time then key, so paging sees each row once.
func (q *Queries) PayoutsInFlightAfter(ctx context.Context, after PayoutInFlight, before time.Time, limit int) ([]PayoutInFlight, error) {
	rows, err := q.pool.Query(ctx, `SELECT merchant_id, environment, reference, debited_at FROM rm_payouts_in_flight
		WHERE debited_at < $1 AND (debited_at, merchant_id, environment, reference) > ($2, $3, $4, $5)
		ORDER BY debited_at, merchant_id, environment, reference LIMIT $6`,
		before, after.DebitedAt, after.MerchantID, string(after.Environment), after.Reference, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[PayoutInFlight])
}

// Withdrawals lists env's withdrawals created in [from, to), of every
// merchant, as the ledger read model has them (for reconciliation).
func (q *Queries) Withdrawals(ctx context.Context, env domain.Environment, from, to time.Time) ([]ledger.Record, error) {
	rows, err := q.pool.Query(ctx, `SELECT record FROM rm_transactions
		WHERE environment = $1 AND transaction_type = $2 AND created_at >= $3 AND created_at < $4 ORDER BY created_at`,
		string(env), string(ledger.Withdrawal), from, to)
	if err != nil {
		return nil, err
	}
	recs, err := pgx.CollectRows(rows, scanRecord)
	if err != nil {
		return nil, err
	}
	return recs, q.openRecords(ctx, recs)
}

// scanRecord scans a record's JSON.
func scanRecord(r pgx.CollectableRow) (ledger.Record, error) {
	var raw []byte
	var rec ledger.Record
	if err := r.Scan(&raw); err != nil {
		return rec, err
	}
	return rec, json.Unmarshal(raw, &rec)
}

// openRecords opens the personal fields of recs, read from rm_transactions.
func (q *Queries) openRecords(ctx context.Context, recs []ledger.Record) error {
	for i := range recs {
		if err := q.openRecordFields(ctx, &recs[i]); err != nil {
			return err
		}
	}
	return nil
}

// ErrNoSuchTransaction: no record of the ledger read model has that id.
var ErrNoSuchTransaction = errors.New("projections: no transaction has that id")

// TransactionKey is the merchant, environment, reference and type of the
// record id (ErrNoSuchTransaction when the read model has none).
func (q *Queries) TransactionKey(ctx context.Context, id string) (merchantID string, env domain.Environment, reference string, typ ledger.Type, err error) {
	var e, t string
	err = q.pool.QueryRow(ctx, `SELECT merchant_id, environment, reference, transaction_type FROM rm_transactions WHERE id = $1`, id).
		Scan(&merchantID, &e, &reference, &t)
	if errors.Is(err, pgx.ErrNoRows) {
		err = ErrNoSuchTransaction
	}
	return merchantID, domain.Environment(e), reference, ledger.Type(t), err
}

// collectedLookback is how long before a period a record collected in it
// may have been created: a deposit intent is staged before the transfer
// that settles it.
const collectedLookback = 30 * 24 * time.Hour

// Collected lists env's deposits and escrow payments that succeeded in
// [from, to) (by the time they were last written), oldest first: the
// records a provider's collections may have settled, for reconciliation.
func (q *Queries) Collected(ctx context.Context, env domain.Environment, from, to time.Time) ([]ledger.Record, error) {
	rows, err := q.pool.Query(ctx, `SELECT record FROM rm_transactions
		WHERE environment = $1 AND transaction_type IN ($2, $3) AND status = $4 AND created_at >= $5 AND created_at < $6
		ORDER BY created_at`,
		string(env), string(ledger.Deposit), string(ledger.EscrowPayment), string(ledger.Success), from.Add(-collectedLookback), to)
	if err != nil {
		return nil, err
	}
	recs, err := pgx.CollectRows(rows, scanRecord)
	if err != nil {
		return nil, err
	}
	if err := q.openRecords(ctx, recs); err != nil {
		return nil, err
	}
	out := recs[:0]
	for _, r := range recs {
		if !r.UpdatedAt.Before(from) && r.UpdatedAt.Before(to) {
			out = append(out, r)
		}
	}
	return out, nil
}
