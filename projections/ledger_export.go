package projections

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain"
)

// EachLedgerRecord calls each with every transaction record of a merchant
// environment, the merchant's and its customers' alike, newest first, as
// one consistent snapshot read in batches (the dashboard's ledger export).
func (q *Queries) EachLedgerRecord(ctx context.Context, merchantID string, env domain.Environment, each func(record []byte) error) error {
	tx, err := q.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var last *int64
	for {
		rows, err := tx.Query(ctx, `SELECT record, pos FROM rm_transactions WHERE merchant_id = $1 AND environment = $2
			AND ($3::bigint IS NULL OR pos < $3) ORDER BY pos DESC LIMIT $4`, merchantID, string(env), last, flatBatch)
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
