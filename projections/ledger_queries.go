package projections

import (
	"context"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
)

// Balances is a holder's two balances.
type Balances struct {
	Main   money.Amount
	Escrow money.Amount
}

// Balances reads a customer's (holder customer, id = customer id) or the
// merchant's (holder merchant, id = merchant id) balances.
func (q *Queries) Balances(ctx context.Context, merchantID string, env domain.Environment, holder ledger.Holder, id string) (Balances, error) {
	rows, err := q.pool.Query(ctx, `SELECT bucket, balance FROM rm_balances
		WHERE holder_id = $1 AND holder = $2 AND merchant_id = $3 AND environment = $4`, id, string(holder), merchantID, string(env))
	if err != nil {
		return Balances{}, err
	}
	defer rows.Close()
	var b Balances
	for rows.Next() {
		var bucket string
		var v int64
		if err := rows.Scan(&bucket, &v); err != nil {
			return b, err
		}
		switch ledger.Bucket(bucket) {
		case ledger.Main:
			b.Main = money.Amount(v)
		case ledger.Escrow:
			b.Escrow = money.Amount(v)
		}
	}
	return b, rows.Err()
}

// AccountBalance is one row of the balances read model.
type AccountBalance struct {
	Environment domain.Environment
	Account     ledger.Account
	Balance     money.Amount
}

// MerchantBalances lists every account balance of a merchant (both
// environments), for the audit.
func (q *Queries) MerchantBalances(ctx context.Context, merchantID string) ([]AccountBalance, error) {
	rows, err := q.pool.Query(ctx, `SELECT environment, holder, holder_id, bucket, balance FROM rm_balances WHERE merchant_id = $1
		ORDER BY environment, holder, holder_id, bucket`, merchantID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []AccountBalance
	for rows.Next() {
		var env, holder, id, bucket string
		var v int64
		if err := rows.Scan(&env, &holder, &id, &bucket, &v); err != nil {
			return nil, err
		}
		out = append(out, AccountBalance{Environment: domain.Environment(env),
			Account: ledger.Account{Holder: ledger.Holder(holder), ID: id, Bucket: ledger.Bucket(bucket)}, Balance: money.Amount(v)})
	}
	return out, rows.Err()
}

// TransactionFilter selects transaction records: a customer's history
// (CustomerID set) or the merchant's ledger (CustomerID empty).
type TransactionFilter struct {
	MerchantID  string
	Environment domain.Environment
	CustomerID  string
	Types       []string
	Reference   string
	From, To    *time.Time // To is exclusive
}
