package projections

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/projector"
)

// Customers builds the customer listing and lookup table, the customers'
// names, email, phone, BVN, date of birth and block reason sealed with
// Sealer (see sealed.go).
type Customers struct {
	Sealer domain.Sealer
}

func (Customers) StreamPrefixes() []string { return []string{"customer-"} }
func (Customers) Name() string             { return CustomersName }
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
DROP INDEX IF EXISTS rm_customers_email;
DROP INDEX IF EXISTS rm_customers_phone;` + customerListingDDL()
}

func (c Customers) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error {
	return projector.ApplyPlan(ctx, c, tx, events)
}

// Plan queues the batch's writes, in its order, for one round trip: each
// run of creations one insert that moves the listing's count with it
// (customerCreateSQL), each other event one update.
func (c Customers) Plan(ctx context.Context, _ Querier, events []eventstore.RecordedEvent, b *pgx.Batch) (func(), error) {
	var created customerCreations
	for _, re := range events {
		id, ok := strings.CutPrefix(re.Stream, "customer-")
		if !ok {
			continue
		}
		ev, err := customer.Registry.Decode(re.Type, re.Data)
		if err != nil {
			return nil, err
		}
		if e, ok := ev.(customer.Created); ok {
			if err := c.sealCreated(ctx, id, &e); err != nil {
				return nil, err
			}
			created.add(id, e)
			continue
		}
		// The creations before the event come first: it may change one.
		created.queue(b)
		if err := c.sealChange(ctx, id, &ev); err != nil {
			return nil, err
		}
		queueCustomerChange(b, id, ev)
	}
	created.queue(b)
	return nil, nil
}

// The sealed columns of rm_customers, as their places.
const (
	customerFirstname = "rm_customers.firstname"
	customerLastname  = "rm_customers.lastname"
	customerEmail     = "rm_customers.email"
	customerPhone     = "rm_customers.phone"
	customerBVN       = "rm_customers.bvn"
	customerDOB       = "rm_customers.dob"
	customerReason    = "rm_customers.blocked_reason"
)

// sealCreated seals the personal fields of customer id's creation, as its
// row keeps them.
func (c Customers) sealCreated(ctx context.Context, id string, e *customer.Created) error {
	return c.seal(ctx, id, []string{customerFirstname, customerLastname, customerEmail, customerPhone, customerBVN, customerDOB},
		&e.Firstname, &e.Lastname, &e.Email, &e.Phone, &e.BVN, &e.DOB)
}

// sealChange seals the personal fields of another event of customer id's.
func (c Customers) sealChange(ctx context.Context, id string, ev *domain.Event) error {
	switch e := (*ev).(type) {
	case customer.ProfileUpdated:
		if err := c.seal(ctx, id, []string{customerFirstname, customerLastname, customerEmail}, e.Firstname, e.Lastname, e.Email); err != nil {
			return err
		}
		*ev = e
	case customer.Blocked:
		if err := c.seal(ctx, id, []string{customerReason}, &e.Reason); err != nil {
			return err
		}
		*ev = e
	}
	return nil
}

// seal seals in place the values vs point to (nil: absent) for the places
// of where, pairwise.
func (c Customers) seal(ctx context.Context, id string, where []string, vs ...*string) error {
	for i, v := range vs {
		if v == nil {
			continue
		}
		sealed, err := sealFor(ctx, c.Sealer, domain.CustomerData(id), where[i], *v)
		if err != nil {
			return fmt.Errorf("projections: sealing %s of customer %s: %w", where[i], id, err)
		}
		*v = sealed
	}
	return nil
}

// customerInsertSQL writes a run of creations. A customer not yet written
// takes the next position of its tenant, in the run's order; one written
// already (a creation applied again) is left as it is.
const customerInsertSQL = `INSERT INTO rm_customers (customer_id, merchant_id, environment, firstname, lastname, email, phone,
		country_id, bvn, dob, created_at, updated_at, pos)
	SELECT x.id, x.merchant, x.env, x.firstname, x.lastname, x.email, x.phone, x.country, x.bvn, x.dob, x.created, x.created,
		(SELECT coalesce(max(pos), 0) FROM rm_customers WHERE merchant_id = x.merchant AND environment = x.env)
			+ row_number() OVER (PARTITION BY x.merchant, x.env ORDER BY x.ord)
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[],
		$11::timestamptz[]) WITH ORDINALITY AS x(id, merchant, env, firstname, lastname, email, phone, country, bvn, dob, created, ord)
	LEFT JOIN LATERAL (SELECT 1 AS written FROM rm_customers o WHERE o.customer_id = x.id LIMIT 1) o ON true -- see byIDs
	WHERE o.written IS NULL
	ORDER BY x.ord
	ON CONFLICT (customer_id) DO NOTHING`

// customerCreateSQL is customerInsertSQL counting the customers it writes.
var customerCreateSQL = customersKept.changeSQL(customerInsertSQL)

// The updates of a customer's row; none changes a column its listing's
// keys or position come from (customersKept is fixed).
const (
	customerProfileSQL = `UPDATE rm_customers SET firstname = coalesce($2, firstname), lastname = coalesce($3, lastname),
		email = coalesce($4, email), updated_at = $5 WHERE customer_id = $1`
	customerPermissionsSQL = `UPDATE rm_customers SET can_buy = $2, can_sell = $3, can_withdraw = $4, updated_at = $5 WHERE customer_id = $1`
	customerBlockSQL       = `UPDATE rm_customers SET status = 'blocked', blocked_reason = $2, blocked_at = $3, updated_at = $3 WHERE customer_id = $1`
	customerUnblockSQL     = `UPDATE rm_customers SET status = 'active', blocked_reason = NULL, blocked_at = NULL, updated_at = $2 WHERE customer_id = $1`
)

// customerCreations are a run of creations, as customerInsertSQL's arrays.
type customerCreations struct {
	ids, merchants, envs, firstnames, lastnames, emails, phones, countries, bvns, dobs []string
	created                                                                            []time.Time
}

func (c *customerCreations) add(id string, e customer.Created) {
	c.ids, c.merchants, c.envs = append(c.ids, id), append(c.merchants, e.MerchantID), append(c.envs, string(e.Environment))
	c.firstnames, c.lastnames, c.emails = append(c.firstnames, e.Firstname), append(c.lastnames, e.Lastname), append(c.emails, e.Email)
	c.phones, c.countries = append(c.phones, e.Phone), append(c.countries, e.CountryID)
	c.bvns, c.dobs, c.created = append(c.bvns, e.BVN), append(c.dobs, e.DOB), append(c.created, e.CreatedAt)
}

// queue queues the run, if any, and starts a new one.
func (c *customerCreations) queue(b *pgx.Batch) {
	if len(c.ids) == 0 {
		return
	}
	b.Queue(customerCreateSQL, c.ids, c.merchants, c.envs, c.firstnames, c.lastnames, c.emails, c.phones, c.countries,
		c.bvns, c.dobs, c.created)
	*c = customerCreations{}
}

// queueCustomerChange queues the update an event other than a creation
// makes to customer id's row.
func queueCustomerChange(b *pgx.Batch, id string, ev any) {
	switch e := ev.(type) {
	case customer.ProfileUpdated:
		b.Queue(customerProfileSQL, id, e.Firstname, e.Lastname, e.Email, e.UpdatedAt)
	case customer.PermissionsChanged:
		b.Queue(customerPermissionsSQL, id, e.Permissions.CanBuy, e.Permissions.CanSell, e.Permissions.CanWithdraw, e.UpdatedAt)
	case customer.Blocked:
		b.Queue(customerBlockSQL, id, e.Reason, e.BlockedAt)
	case customer.Unblocked:
		b.Queue(customerUnblockSQL, id, e.UnblockedAt)
	}
}
