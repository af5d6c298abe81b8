package projections

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain"
)

// WhitelistAddress is the whitelisted crypto address record of the spec.
type WhitelistAddress struct {
	ID            string    `json:"id"`
	WalletAddress string    `json:"walletAddress"`
	Network       string    `json:"network"`
	Label         string    `json:"label"`
	DateAdded     time.Time `json:"dateAdded"`
	LastUpdated   time.Time `json:"lastUpdated"`
}

// WhitelistAddresses lists a customer's whitelisted addresses, newest first.
// A customer id names one merchant and environment, which auth has checked;
// the tenant is matched again so a mistake cannot leak another's list.
func (q *Queries) WhitelistAddresses(ctx context.Context, merchantID string, env domain.Environment, customerID string) ([]WhitelistAddress, error) {
	rows, err := q.pool.Query(ctx, `SELECT `+whitelistColumns+`
		FROM rm_whitelist_addresses
		WHERE customer_id = $1 AND merchant_id = $2 AND environment = $3 AND removed_at IS NULL
		ORDER BY date_added DESC, seq DESC`, customerID, merchantID, string(env))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []WhitelistAddress{}
	for rows.Next() {
		a, err := scanWhitelistAddress(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	for i := range out {
		if err := q.openAddress(ctx, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// WhitelistAddressByID returns one address of a customer, removed or not
// (a removed one shows its removal time as lastUpdated).
func (q *Queries) WhitelistAddressByID(ctx context.Context, customerID, addressID string) (WhitelistAddress, bool, error) {
	a, err := scanWhitelistAddress(q.pool.QueryRow(ctx, `SELECT `+whitelistColumns+`
		FROM rm_whitelist_addresses WHERE address_id = $1 AND customer_id = $2`, addressID, customerID))
	if errors.Is(err, pgx.ErrNoRows) {
		return a, false, nil
	}
	if err != nil {
		return a, false, err
	}
	return a, true, q.openAddress(ctx, &a)
}

const whitelistColumns = `address_id, wallet_address, network, label, date_added, last_updated`

// The sealed columns of rm_whitelist_addresses, as their places.
const (
	whitelistAddress = "rm_whitelist_addresses.wallet_address"
	whitelistLabel   = "rm_whitelist_addresses.label"
)

// openAddress opens the sealed fields of an address as scanned.
func (q *Queries) openAddress(ctx context.Context, a *WhitelistAddress) error {
	return q.openAll(ctx, []string{whitelistAddress, whitelistLabel}, &a.WalletAddress, &a.Label)
}

func scanWhitelistAddress(row pgx.Row) (WhitelistAddress, error) {
	var a WhitelistAddress
	err := row.Scan(&a.ID, &a.WalletAddress, &a.Network, &a.Label, &a.DateAdded, &a.LastUpdated)
	a.DateAdded, a.LastUpdated = a.DateAdded.UTC(), a.LastUpdated.UTC()
	return a, err
}
