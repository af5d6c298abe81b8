package projections

import (
	"context"
	"strconv"

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
	return eachInBatches(ctx, tx, `SELECT record, pos FROM rm_transactions WHERE merchant_id = $1 AND environment = $2
		AND ($3::bigint IS NULL OR pos < $3) ORDER BY pos DESC LIMIT `+strconv.Itoa(flatBatch), []any{merchantID, string(env)}, q.opening(ctx, each))
}
