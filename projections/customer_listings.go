package projections

import (
	"context"

	"github.com/escrowd/escrowd/view"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain"
)

// customersKept counts the customer listing (key customers: every customer
// of the tenant; none is ever removed). A customer's keys and position are
// set when it is created and never change, so the table is fixed.
var customersKept = keptTable{table: "rm_customers", counts: "rm_customer_counts", id: "customer_id",
	orders: []keyedOrder{{keys: "listing_keys", pos: "pos"}}, fixed: true}

func customerListingDDL() string {
	return `
ALTER TABLE rm_customers ADD COLUMN IF NOT EXISTS pos bigint;
ALTER TABLE rm_customers ADD COLUMN IF NOT EXISTS listing_keys text[] GENERATED ALWAYS AS (ARRAY['customers']) STORED;` +
		countsDDL(customersKept.counts) + customersKept.backfillDDL([]backfill{{pos: "pos", where: "true", order: "seq"}}) + `
CREATE UNIQUE INDEX IF NOT EXISTS rm_customers_pos ON rm_customers (merchant_id, environment, pos);`
}

// ListCustomers pages a merchant's customers, newest first.
func (q *Queries) ListCustomers(ctx context.Context, merchantID string, env domain.Environment, p view.Page) ([]Customer, view.Pagination, error) {
	l := listing{kept: customersKept, pos: "pos", merchant: merchantID, environment: env, columns: customerColumns,
		branches: []string{`true`}, keys: []string{"customers"}}
	out := []Customer{}
	pg, err := q.page(ctx, l, p, func(rows pgx.Rows, tail ...any) error {
		c, err := scanCustomerWith(rows, tail...)
		if err != nil {
			return err
		}
		out = append(out, c)
		return nil
	})
	if err != nil {
		return nil, pg, err
	}
	// Opened once the rows are read: opening may read a data key.
	for i := range out {
		if err := q.openCustomer(ctx, &out[i]); err != nil {
			return nil, pg, err
		}
	}
	return out, pg, nil
}
