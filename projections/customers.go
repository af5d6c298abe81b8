package projections

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/eventstore"
)

// Customers builds the customer listing and lookup table.
type Customers struct{}

func (Customers) StreamPrefixes() []string { return []string{"customer-"} }
func (Customers) Name() string             { return "customers" }
func (Customers) Tables() []string         { return []string{"rm_customers", customersKept.counts} }
func (Customers) Schema() string {
	return `
CREATE TABLE IF NOT EXISTS rm_customers (
    customer_id    text PRIMARY KEY,
    merchant_id    text NOT NULL,
    environment    text NOT NULL,
    firstname      text NOT NULL,
    lastname       text NOT NULL,
    email          text NOT NULL,
    phone          text NOT NULL,
    country_id     text NOT NULL,
    bvn            text NOT NULL DEFAULT '',
    dob            text NOT NULL DEFAULT '',
    status         text NOT NULL DEFAULT 'active',
    blocked_reason text,
    blocked_at     timestamptz,
    can_buy        boolean NOT NULL DEFAULT true,
    can_sell       boolean NOT NULL DEFAULT true,
    can_withdraw   boolean NOT NULL DEFAULT true,
    seq            bigserial,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS rm_customers_list ON rm_customers (merchant_id, environment, created_at DESC, seq DESC);
CREATE INDEX IF NOT EXISTS rm_customers_email ON rm_customers (merchant_id, environment, email);
CREATE INDEX IF NOT EXISTS rm_customers_phone ON rm_customers (merchant_id, environment, phone);` + customerListingDDL()
}

func (Customers) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error {
	for _, re := range events {
		if !strings.HasPrefix(re.Stream, "customer-") {
			continue
		}
		ev, err := customer.Registry.Decode(re.Type, re.Data)
		if err != nil {
			return err
		}
		id := strings.TrimPrefix(re.Stream, "customer-")
		write := func() error { return applyCustomer(ctx, tx, id, ev) }
		if _, created := ev.(customer.Created); created {
			// Only a creation changes the listing (keptTable.execChange).
			err = customersKept.execChange(ctx, tx, id, write)
		} else {
			err = write()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// applyCustomer writes the effect of one event of customer id.
func applyCustomer(ctx context.Context, tx pgx.Tx, id string, ev any) error {
	var err error
	switch e := ev.(type) {
	case customer.Created:
		_, err = tx.Exec(ctx, `INSERT INTO rm_customers (customer_id, merchant_id, environment, firstname, lastname, email, phone,
				country_id, bvn, dob, created_at, updated_at, pos) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$11,`+customerPosSQL+`)
				ON CONFLICT (customer_id) DO NOTHING`,
			id, e.MerchantID, string(e.Environment), e.Firstname, e.Lastname, e.Email, e.Phone, e.CountryID, e.BVN, e.DOB, e.CreatedAt)
	case customer.ProfileUpdated:
		_, err = tx.Exec(ctx, `UPDATE rm_customers SET firstname = coalesce($2, firstname), lastname = coalesce($3, lastname),
				email = coalesce($4, email), updated_at = $5 WHERE customer_id = $1`, id, e.Firstname, e.Lastname, e.Email, e.UpdatedAt)
	case customer.PermissionsChanged:
		_, err = tx.Exec(ctx, `UPDATE rm_customers SET can_buy = $2, can_sell = $3, can_withdraw = $4, updated_at = $5 WHERE customer_id = $1`,
			id, e.Permissions.CanBuy, e.Permissions.CanSell, e.Permissions.CanWithdraw, e.UpdatedAt)
	case customer.Blocked:
		_, err = tx.Exec(ctx, `UPDATE rm_customers SET status = 'blocked', blocked_reason = $2, blocked_at = $3, updated_at = $3 WHERE customer_id = $1`,
			id, e.Reason, e.BlockedAt)
	case customer.Unblocked:
		_, err = tx.Exec(ctx, `UPDATE rm_customers SET status = 'active', blocked_reason = NULL, blocked_at = NULL, updated_at = $2 WHERE customer_id = $1`,
			id, e.UnblockedAt)
	}
	return err
}
