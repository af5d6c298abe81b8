package projections

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/hold"
)

// NewFill folds the customers of a rebuild (Filler): each row as
// Plan writes it, a new customer taking the next position of
// its tenant when created.
func (c Customers) NewFill() Fill {
	return &customerFill{c: c, held: hold.New[customerRow](fillHold), pos: positions{}}
}

// customerFill holds the rows as they are kept, sealed values sealed.
type customerFill struct {
	c    Customers
	held *hold.Rows[customerRow]
	pos  positions
}

// customerRow is a row of rm_customers, in customerFillColumns' order.
type customerRow struct {
	merchant, env, firstname, lastname, email, phone, country, bvn, dob, status string
	blockedReason                                                               *string
	blockedAt                                                                   *time.Time
	canBuy, canSell, canWithdraw                                                bool
	createdAt, updatedAt                                                        time.Time
	pos                                                                         int64
}

// customerFillColumns are the columns of a customer's row (customerRow,
// then its id and seq).
var customerFillColumns = []string{"merchant_id", "environment", "firstname", "lastname", "email", "phone", "country_id", "bvn", "dob",
	"status", "blocked_reason", "blocked_at", "can_buy", "can_sell", "can_withdraw", "created_at", "updated_at", "pos"}

func (c customerRow) values() []any {
	return []any{c.merchant, c.env, c.firstname, c.lastname, c.email, c.phone, c.country, c.bvn, c.dob,
		c.status, c.blockedReason, c.blockedAt, c.canBuy, c.canSell, c.canWithdraw, c.createdAt, c.updatedAt, c.pos}
}

func (f *customerFill) Take(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error {
	// A customer met again after it was written continues from its row.
	if again := f.held.Missing(continued(events, "customer-")); len(again) > 0 {
		if err := f.readBack(ctx, tx, again); err != nil {
			return err
		}
	}
	for _, re := range events {
		id, ok := strings.CutPrefix(re.Stream, "customer-")
		if !ok {
			continue
		}
		ev, err := customer.Registry.Decode(re.Type, re.Data)
		if err != nil {
			return err
		}
		r := f.held.Get(id)
		if e, created := ev.(customer.Created); created {
			if r == nil {
				if err := f.c.sealCreated(ctx, id, &e); err != nil {
					return err
				} // a second creation changes nothing, as the insert's ON CONFLICT
				f.held.Add(id, customerRow{merchant: e.MerchantID, env: string(e.Environment), firstname: e.Firstname, lastname: e.Lastname,
					email: e.Email, phone: e.Phone, country: e.CountryID, bvn: e.BVN, dob: e.DOB, status: "active",
					canBuy: true, canSell: true, canWithdraw: true, createdAt: e.CreatedAt, updatedAt: e.CreatedAt,
					pos: f.pos.next(tenant{e.MerchantID, string(e.Environment)})}, false)
			}
			continue
		}
		if r == nil {
			continue // no row to update, as the updates find none
		}
		if err := f.c.sealChange(ctx, id, &ev); err != nil {
			return err
		}
		c := &r.V
		switch e := ev.(type) {
		case customer.ProfileUpdated:
			if e.Firstname != nil {
				c.firstname = *e.Firstname
			}
			if e.Lastname != nil {
				c.lastname = *e.Lastname
			}
			if e.Email != nil {
				c.email = *e.Email
			}
			c.updatedAt = e.UpdatedAt
		case customer.PermissionsChanged:
			c.canBuy, c.canSell, c.canWithdraw, c.updatedAt = e.Permissions.CanBuy, e.Permissions.CanSell, e.Permissions.CanWithdraw, e.UpdatedAt
		case customer.Blocked:
			reason, at := e.Reason, e.BlockedAt
			c.status, c.blockedReason, c.blockedAt, c.updatedAt = "blocked", &reason, &at, e.BlockedAt
		case customer.Unblocked:
			c.status, c.blockedReason, c.blockedAt, c.updatedAt = "active", nil, nil, e.UnblockedAt
		}
	}
	return f.write(ctx, tx, false)
}

// readBack holds again the customers of ids that have a row.
func (f *customerFill) readBack(ctx context.Context, tx pgx.Tx, ids []string) error {
	rows, err := tx.Query(ctx, `SELECT customer_id, `+strings.Join(customerFillColumns, ", ")+` FROM rm_customers WHERE customer_id = ANY ($1)`, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id string
			c  customerRow
		)
		if err := rows.Scan(&id, &c.merchant, &c.env, &c.firstname, &c.lastname, &c.email, &c.phone, &c.country, &c.bvn, &c.dob,
			&c.status, &c.blockedReason, &c.blockedAt, &c.canBuy, &c.canSell, &c.canWithdraw, &c.createdAt, &c.updatedAt, &c.pos); err != nil {
			return err
		}
		f.held.Add(id, c, true)
	}
	return rows.Err()
}

func (f *customerFill) Finish(ctx context.Context, tx pgx.Tx) error {
	if err := f.write(ctx, tx, true); err != nil {
		return err
	}
	if err := finishSeq(ctx, tx, "rm_customers", f.held); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, customersKept.countAllSQL())
	return err
}

// write writes the customers due (hold.Rows.Due): new ones with COPY,
// those written before with the columns the updates change.
func (f *customerFill) write(ctx context.Context, tx pgx.Tx, all bool) error {
	fresh, stored := f.held.Due(all)
	rows := make([][]any, 0, len(fresh))
	for _, r := range fresh {
		rows = append(rows, append(r.V.values(), r.ID, r.Seq()))
	}
	if err := copyRows(ctx, tx, "rm_customers", append(customerFillColumns[:len(customerFillColumns):len(customerFillColumns)], "customer_id", "seq"), rows); err != nil {
		return err
	}
	if len(stored) == 0 {
		return nil
	}
	n := len(stored)
	var (
		ids, firstnames, lastnames, emails, statuses = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		reasons                                      = make([]*string, n)
		blockedAts                                   = make([]*time.Time, n)
		buys, sells, withdraws                       = make([]bool, n), make([]bool, n), make([]bool, n)
		updated                                      = make([]time.Time, n)
	)
	for i, r := range stored {
		c := r.V
		ids[i], firstnames[i], lastnames[i], emails[i], statuses[i] = r.ID, c.firstname, c.lastname, c.email, c.status
		reasons[i], blockedAts[i], buys[i], sells[i], withdraws[i], updated[i] = c.blockedReason, c.blockedAt, c.canBuy, c.canSell, c.canWithdraw, c.updatedAt
	}
	_, err := tx.Exec(ctx, `UPDATE rm_customers o SET firstname = x.firstname, lastname = x.lastname, email = x.email, status = x.status,
			blocked_reason = x.reason, blocked_at = x.blocked_at, can_buy = x.can_buy, can_sell = x.can_sell, can_withdraw = x.can_withdraw,
			updated_at = x.updated_at
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[], $8::bool[], $9::bool[], $10::bool[],
			$11::timestamptz[]) AS x(id, firstname, lastname, email, status, reason, blocked_at, can_buy, can_sell, can_withdraw, updated_at)
		WHERE o.customer_id = x.id`, ids, firstnames, lastnames, emails, statuses, reasons, blockedAts, buys, sells, withdraws, updated)
	return err
}
