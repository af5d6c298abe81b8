package projections

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/whitelist"
	"github.com/escrowd/escrowd/eventstore"
)

// Whitelist builds the table of customers' whitelisted crypto addresses.
// A removal marks the row, so a repeated add never brings it back.
type Whitelist struct {
	// Sealer seals the addresses and their labels with the customer's
	// data key (see sealed.go).
	Sealer domain.Sealer
}

func (Whitelist) StreamPrefixes() []string { return []string{"whitelist-"} }
func (Whitelist) Name() string             { return WhitelistName }
func (Whitelist) Tables() []string         { return []string{"rm_whitelist_addresses"} }
func (Whitelist) Schema() string {
	return `
CREATE TABLE IF NOT EXISTS rm_whitelist_addresses (
    address_id     text PRIMARY KEY,
    customer_id    text NOT NULL,
    merchant_id    text NOT NULL,
    environment    text NOT NULL,
    wallet_address text NOT NULL,
    network        text NOT NULL,
    label          text NOT NULL DEFAULT '',
    seq            bigserial,
    date_added     timestamptz NOT NULL,
    last_updated   timestamptz NOT NULL,
    removed_at     timestamptz
);
CREATE INDEX IF NOT EXISTS rm_whitelist_addresses_customer
    ON rm_whitelist_addresses (customer_id, date_added DESC, seq DESC) WHERE removed_at IS NULL;`
}

func (w Whitelist) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error {
	for _, re := range events {
		if !strings.HasPrefix(re.Stream, "whitelist-") {
			continue
		}
		ev, err := whitelist.Registry.Decode(re.Type, re.Data)
		if err != nil {
			return err
		}
		switch e := ev.(type) {
		case whitelist.AddressWhitelisted:
			owner := domain.CustomerData(strings.TrimPrefix(re.Stream, "whitelist-"))
			if e.WalletAddress, err = sealFor(ctx, w.Sealer, owner, whitelistAddress, e.WalletAddress); err != nil {
				return err
			}
			if e.Label, err = sealFor(ctx, w.Sealer, owner, whitelistLabel, e.Label); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `INSERT INTO rm_whitelist_addresses (address_id, customer_id, merchant_id, environment,
				wallet_address, network, label, date_added, last_updated) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$8)
				ON CONFLICT (address_id) DO NOTHING`,
				e.AddressID, strings.TrimPrefix(re.Stream, "whitelist-"), e.MerchantID, string(e.Environment),
				e.WalletAddress, e.Network, e.Label, e.AddedAt)
		case whitelist.AddressRemoved:
			_, err = tx.Exec(ctx, `UPDATE rm_whitelist_addresses SET removed_at = $2, last_updated = $2
				WHERE address_id = $1 AND removed_at IS NULL`, e.AddressID, e.RemovedAt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
