package projections

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/hold"
	"github.com/escrowd/escrowd/internal/projector"
)

// NewFill folds the ledger of a rebuild (Filler): the balances and the
// payouts in flight are held whole (one row per account, per payout
// not yet ended) and written at the end; the transaction records are
// held while they change and written once, a new record taking the next
// position of its tenant when first met, as transactionUpsertSQL gives
// them.
func (l Ledger) NewFill() Fill {
	return &ledgerFill{sealer: l.Sealer, balances: map[balanceKey]int64{}, payouts: map[payoutKey]time.Time{},
		records: hold.New[filledRecord](fillHold), pos: positions{}}
}

type ledgerFill struct {
	sealer   domain.Sealer
	balances map[balanceKey]int64
	payouts  map[payoutKey]time.Time
	records  *hold.Rows[filledRecord]
	pos      positions
}

// filledRecord is a record folded so far: its last version, and the
// columns its first one gave the row (an upsert of the row changes only
// its status and record).
type filledRecord struct {
	first, last ledger.Record
	pos         int64
}

func (f *ledgerFill) Take(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error {
	type step struct {
		re  eventstore.RecordedEvent
		e   ledger.Entry
		eff ledger.Effect
	}
	var (
		steps []step
		ids   []string
	)
	for _, re := range events {
		e, ok, err := projector.DecodeEntry(re)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		eff := e.Ledger()
		steps = append(steps, step{re, e, eff})
		for _, r := range eff.Records {
			ids = append(ids, r.ID)
		}
	}
	// A record not held is new, or was written and is met again: the
	// shadow table says which.
	if again := f.records.Missing(ids); len(again) > 0 {
		if err := f.readBack(ctx, tx, again); err != nil {
			return err
		}
	}
	for _, s := range steps {
		switch ev := s.e.(type) {
		case payment.PayoutStarted:
			k := payoutKeyOf(ev.Record)
			if _, ok := f.payouts[k]; !ok {
				f.payouts[k] = s.re.RecordedAt
			}
		case payment.PayoutCompleted:
			delete(f.payouts, payoutKeyOf(ev.Record))
		case payment.PayoutFailed:
			delete(f.payouts, payoutKeyOf(ev.Record))
		case payment.PayoutReversed:
			delete(f.payouts, payoutKeyOf(ev.Record))
		}
		eff := s.eff
		if m := eff.Movement; m != nil {
			for acct, delta := range m.Deltas() {
				f.balances[balanceKey{m.MerchantID, string(m.Environment), string(acct.Holder), acct.ID, string(acct.Bucket)}] += delta.Kobo()
			}
		}
		for _, rec := range eff.Records {
			r := f.records.Get(rec.ID)
			if r == nil {
				r = f.records.Add(rec.ID, filledRecord{first: rec, pos: f.pos.next(tenant{rec.MerchantID, string(rec.Environment)})}, false)
			}
			r.V.last = rec
		}
	}
	return f.writeRecords(ctx, tx, false)
}

// readBack holds the records of ids that have a row, as written (only
// their status and record change from now on).
func (f *ledgerFill) readBack(ctx context.Context, tx pgx.Tx, ids []string) error {
	rows, err := tx.Query(ctx, `SELECT id, pos FROM rm_transactions WHERE id = ANY ($1)`, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id  string
			pos int64
		)
		if err := rows.Scan(&id, &pos); err != nil {
			return err
		}
		f.records.Add(id, filledRecord{pos: pos}, true)
	}
	return rows.Err()
}

func (f *ledgerFill) Finish(ctx context.Context, tx pgx.Tx) error {
	if err := f.writeRecords(ctx, tx, true); err != nil {
		return err
	}
	if err := finishSeq(ctx, tx, "rm_transactions", f.records); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, transactionsKept.countAllSQL()); err != nil {
		return err
	}
	balances := make([][]any, 0, len(f.balances))
	for k, n := range f.balances {
		balances = append(balances, []any{k.merchant, k.env, k.holder, k.id, k.bucket, n})
	}
	if err := copyRows(ctx, tx, "rm_balances", []string{"merchant_id", "environment", "holder", "holder_id", "bucket", "balance"}, balances); err != nil {
		return err
	}
	payouts := make([][]any, 0, len(f.payouts))
	for k, at := range f.payouts {
		payouts = append(payouts, []any{k.merchant, k.env, k.ref, at})
	}
	return copyRows(ctx, tx, "rm_payouts_in_flight", []string{"merchant_id", "environment", "reference", "debited_at"}, payouts)
}

// writeRecords writes the records due (hold.Rows.Due): new ones with COPY,
// those written before their status and record.
func (f *ledgerFill) writeRecords(ctx context.Context, tx pgx.Tx, all bool) error {
	fresh, stored := f.records.Due(all)
	rows := make([][]any, 0, len(fresh))
	for _, r := range fresh {
		doc, err := keptRecord(ctx, f.sealer, r.V.last)
		if err != nil {
			return err
		}
		first := r.V.first
		var customer *string
		if first.CustomerID != "" {
			customer = &first.CustomerID
		}
		rows = append(rows, []any{first.ID, first.MerchantID, string(first.Environment), customer, first.Reference, string(first.Type),
			string(r.V.last.Status), doc, first.CreatedAt, r.V.pos, r.Seq()})
	}
	if err := copyRows(ctx, tx, "rm_transactions", []string{"id", "merchant_id", "environment", "customer_id", "reference",
		"transaction_type", "status", "record", "created_at", "pos", "seq"}, rows); err != nil {
		return err
	}
	if len(stored) == 0 {
		return nil
	}
	ids, statuses, docs := make([]string, len(stored)), make([]string, len(stored)), make([]string, len(stored))
	for i, r := range stored {
		doc, err := keptRecord(ctx, f.sealer, r.V.last)
		if err != nil {
			return err
		}
		ids[i], statuses[i], docs[i] = r.ID, string(r.V.last.Status), string(doc)
	}
	_, err := tx.Exec(ctx, `UPDATE rm_transactions o SET status = x.status, record = x.record
		FROM unnest($1::text[], $2::text[], $3::json[]) AS x(id, status, record) WHERE o.id = x.id`, ids, statuses, docs)
	return err
}
