package projections

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/escrowd/escrowd/view"

	"github.com/jackc/pgx/v5"
)

// transactionsKept counts the transaction listings: the merchant's ledger
// (records without a customer) and each customer's payment history, by
// record type. A record's keys come from its customer and type, which its
// upsert never changes (transactionUpsertSQL), so the table is fixed.
var transactionsKept = keptTable{table: "rm_transactions", counts: "rm_transaction_counts", id: "id",
	orders: []keyedOrder{{keys: "listing_keys", pos: "pos"}}, fixed: true}

// transactionListingDDL adds the listing columns, counts and indexes to
// rm_transactions. Keys: m, m|t=<type> for the merchant's records;
// c|p=<customer>, c|p=<customer>|t=<type> for a customer's.
func transactionListingDDL() string {
	return `
ALTER TABLE rm_transactions ADD COLUMN IF NOT EXISTS pos bigint;
ALTER TABLE rm_transactions ADD COLUMN IF NOT EXISTS listing_keys text[] GENERATED ALWAYS AS (
    CASE WHEN customer_id IS NULL THEN ARRAY['m', 'm|t=' || transaction_type]
    ELSE ARRAY['c|p=' || customer_id, 'c|p=' || customer_id || '|t=' || transaction_type] END) STORED;` +
		countsDDL(transactionsKept.counts) + transactionsKept.backfillDDL([]backfill{{pos: "pos", where: "true", order: "seq"}}) + `
CREATE UNIQUE INDEX IF NOT EXISTS rm_transactions_pos ON rm_transactions (merchant_id, environment, pos);
CREATE INDEX IF NOT EXISTS rm_transactions_merchant_pos ON rm_transactions (merchant_id, environment, pos)
    WHERE customer_id IS NULL;
CREATE INDEX IF NOT EXISTS rm_transactions_merchant_type_pos ON rm_transactions (merchant_id, environment, transaction_type, pos)
    WHERE customer_id IS NULL;
CREATE INDEX IF NOT EXISTS rm_transactions_customer_pos ON rm_transactions (customer_id, pos) WHERE customer_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS rm_transactions_customer_type_pos ON rm_transactions (customer_id, transaction_type, pos)
    WHERE customer_id IS NOT NULL;`
}

// transactionUpsertSQL writes a batch's records; a new record takes the
// next position of its tenant, in the batch's order.
const transactionUpsertSQL = `INSERT INTO rm_transactions (id, merchant_id, environment, customer_id, reference, transaction_type,
		status, record, created_at, pos)
	SELECT x.id, x.merchant, x.env, x.customer, x.ref, x.typ, x.status, x.record, x.created,
		CASE WHEN o.id IS NULL
			THEN (SELECT coalesce(max(pos), 0) FROM rm_transactions WHERE merchant_id = x.merchant AND environment = x.env)
				+ row_number() OVER (PARTITION BY x.merchant, x.env, o.id IS NULL ORDER BY x.ord)
			ELSE o.pos END
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::json[], $9::timestamptz[])
		WITH ORDINALITY AS x(id, merchant, env, customer, ref, typ, status, record, created, ord)
	LEFT JOIN LATERAL (SELECT o.id, o.pos FROM rm_transactions o WHERE o.id = x.id LIMIT 1) o ON true -- see byIDs
	ORDER BY x.ord
	ON CONFLICT (id) DO UPDATE SET status = excluded.status, record = excluded.record`

// transactionChangeSQL is transactionUpsertSQL moving the listings' counts
// with it.
var transactionChangeSQL = transactionsKept.changeSQL(transactionUpsertSQL)

// Transactions lists a page of records newest first, with its pagination.
func (q *Queries) Transactions(ctx context.Context, f TransactionFilter, p view.Page) ([]json.RawMessage, view.Pagination, error) {
	l := transactionsListing(f)
	out := []json.RawMessage{}
	scan := func(rows pgx.Rows, tail ...any) error {
		var doc []byte
		if err := rows.Scan(append([]any{&doc}, tail...)...); err != nil {
			return err
		}
		out = append(out, doc)
		return nil
	}
	pg, err := q.page(ctx, l, p, scan)
	if err != nil {
		return nil, pg, err
	}
	for i, doc := range out {
		if out[i], err = q.OpenRecord(ctx, doc); err != nil {
			return nil, pg, err
		}
	}
	return out, pg, nil
}

// flatBatch is how many records a flat listing reads at a time.
const flatBatch = 500

// EachTransaction calls each with every record f matches, newest first,
// as stored: the unpaged (flat) listing, however many rows match. It
// reads them in batches of one snapshot, so memory stays one batch and
// the rows are those of one moment, however long the caller takes.
func (q *Queries) EachTransaction(ctx context.Context, f TransactionFilter, each func(record []byte) error) error {
	l := transactionsListing(f)
	tx, err := q.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	args := append([]any{l.merchant, string(l.environment)}, l.args...)
	before := len(args) + 1
	sql := `SELECT record, pos FROM rm_transactions WHERE merchant_id = $1 AND environment = $2 AND ((` +
		joinOr(l.branches) + `)) AND ($` + strconv.Itoa(before) + `::bigint IS NULL OR pos < $` + strconv.Itoa(before) +
		`) ORDER BY pos DESC LIMIT ` + strconv.Itoa(flatBatch)
	return eachInBatches(ctx, tx, sql, args, q.opening(ctx, each))
}

// opening is each given the records opened.
func (q *Queries) opening(ctx context.Context, each func(record []byte) error) func(record []byte) error {
	return func(doc []byte) error {
		doc, err := q.OpenRecord(ctx, doc)
		if err != nil {
			return err
		}
		return each(doc)
	}
}

// transactionsListing is the listing f selects.
func transactionsListing(f TransactionFilter) listing {
	l := listing{kept: transactionsKept, pos: "pos", merchant: f.MerchantID, environment: f.Environment, columns: "record"}
	var owner, key string
	if f.CustomerID != "" {
		owner, key = `customer_id = `+l.arg(f.CustomerID), "c|p="+f.CustomerID
	} else {
		owner, key = `customer_id IS NULL`, "m"
	}
	if len(f.Types) > 0 {
		// One branch per type (disjoint, each on its type's index).
		for _, t := range dedupe(f.Types) {
			l.branches = append(l.branches, owner+` AND transaction_type = `+l.arg(t))
			l.keys = append(l.keys, key+"|t="+t)
		}
	} else {
		l.branches, l.keys = []string{owner}, []string{key}
	}
	if f.Reference != "" {
		l.and(`reference = ` + l.arg(f.Reference))
		l.keys = nil
	}
	l.keys = withDates(&l, "created_at", f.From, f.To, l.keys)
	return l
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// eachInBatches runs sql, whose last parameter is the position to read
// below (NULL: from the newest) and whose LIMIT is flatBatch, batch after
// batch until one comes back short, calling each with every record read.
func eachInBatches(ctx context.Context, tx pgx.Tx, sql string, args []any, each func(record []byte) error) error {
	var last *int64
	for {
		rows, err := tx.Query(ctx, sql, append(args, last)...)
		if err != nil {
			return err
		}
		n := 0
		for rows.Next() {
			var doc []byte
			var pos int64
			if err := rows.Scan(&doc, &pos); err != nil {
				rows.Close()
				return err
			}
			n++
			last = &pos
			if err := each(doc); err != nil {
				rows.Close()
				return err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if n < flatBatch {
			return nil
		}
	}
}
