package projections

import (
	"context"
	"encoding/json"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/eventstore"
)

// Ledger builds balances (summed from the postings of every movement) and
// the transaction records customers and merchants read. Both tables live in
// one projector so a record and the balance change it explains are always
// visible together.
type Ledger struct{}

func (Ledger) StreamPrefixes() []string { return EntryStreamPrefixes() }
func (Ledger) Name() string             { return "ledger" }
func (Ledger) Tables() []string         { return []string{"rm_balances", "rm_transactions"} }
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
CREATE INDEX IF NOT EXISTS rm_transactions_customer ON rm_transactions (customer_id, created_at DESC, seq DESC) WHERE customer_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS rm_transactions_merchant ON rm_transactions (merchant_id, environment, created_at DESC, seq DESC) WHERE customer_id IS NULL;
CREATE INDEX IF NOT EXISTS rm_transactions_reference ON rm_transactions (merchant_id, environment, reference);`
}

func (Ledger) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error {
	b := &pgx.Batch{}
	for _, re := range events {
		e, ok, err := DecodeEntry(re)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		eff := e.Ledger()
		if m := eff.Movement; m != nil {
			deltas := m.Deltas()
			accts := make([]ledger.Account, 0, len(deltas))
			for a := range deltas {
				accts = append(accts, a)
			}
			// A fixed order keeps concurrent rebuilds and runners from
			// locking rows in different orders.
			sort.Slice(accts, func(i, j int) bool { return accts[i].String() < accts[j].String() })
			for _, acct := range accts {
				delta := deltas[acct]
				b.Queue(`INSERT INTO rm_balances (merchant_id, environment, holder, holder_id, bucket, balance)
					VALUES ($1,$2,$3,$4,$5,$6) ON CONFLICT (holder_id, bucket, holder, merchant_id, environment)
					DO UPDATE SET balance = rm_balances.balance + excluded.balance`,
					m.MerchantID, string(m.Environment), string(acct.Holder), acct.ID, string(acct.Bucket), delta.Kobo())
			}
		}
		for _, r := range eff.Records {
			doc, err := json.Marshal(r)
			if err != nil {
				return err
			}
			var cid *string
			if r.CustomerID != "" {
				cid = &r.CustomerID
			}
			b.Queue(`INSERT INTO rm_transactions (id, merchant_id, environment, customer_id, reference, transaction_type, status, record, created_at)
				VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9) ON CONFLICT (id) DO UPDATE SET status = excluded.status, record = excluded.record`,
				r.ID, r.MerchantID, string(r.Environment), cid, r.Reference, string(r.Type), string(r.Status), doc, r.CreatedAt)
		}
	}
	if b.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, b).Close()
}
