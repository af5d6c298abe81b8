package projections

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/view"
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

// FlatLimit bounds an unpaged (flat) listing.
const FlatLimit = 1000

// Transactions lists records newest first: a page (with its pagination),
// or when flat, every match up to FlatLimit.
func (q *Queries) Transactions(ctx context.Context, f TransactionFilter, p view.Page, flat bool) ([]json.RawMessage, view.Pagination, error) {
	where := ` WHERE merchant_id = $1 AND environment = $2`
	args := []any{f.MerchantID, string(f.Environment)}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.CustomerID != "" {
		where += ` AND customer_id = ` + arg(f.CustomerID)
	} else {
		where += ` AND customer_id IS NULL`
	}
	if len(f.Types) > 0 {
		where += ` AND transaction_type = ANY(` + arg(f.Types) + `)`
	}
	if f.Reference != "" {
		where += ` AND reference = ` + arg(f.Reference)
	}
	if f.From != nil {
		where += ` AND created_at >= ` + arg(*f.From)
	}
	if f.To != nil {
		where += ` AND created_at < ` + arg(*f.To)
	}
	var pg view.Pagination
	limit, offset := FlatLimit, 0
	if !flat {
		var count int64
		if err := q.pool.QueryRow(ctx, `SELECT count(*) FROM rm_transactions`+where, args...).Scan(&count); err != nil {
			return nil, pg, err
		}
		pg = view.NewPagination(p, count)
		limit, offset = p.Limit, (p.Page-1)*p.Limit
	}
	rows, err := q.pool.Query(ctx, `SELECT record FROM rm_transactions`+where+
		` ORDER BY created_at DESC, seq DESC LIMIT `+arg(limit)+` OFFSET `+arg(offset), args...)
	if err != nil {
		return nil, pg, err
	}
	defer rows.Close()
	out := []json.RawMessage{}
	for rows.Next() {
		var doc []byte
		if err := rows.Scan(&doc); err != nil {
			return nil, pg, err
		}
		out = append(out, doc)
	}
	return out, pg, rows.Err()
}
