package httpapi

import (
	"context"

	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/projections"
)

// QueriesDirectory resolves keys and customers from the read models, for
// the auth cache (its only reader, in front of every request).
type QueriesDirectory struct{ Q *projections.Queries }

func customerRefOf(c projections.CustomerAuth) CustomerRef {
	return CustomerRef{ID: c.CustomerID, MerchantID: c.MerchantID, Environment: c.Environment, Blocked: c.Blocked, Permissions: c.Permissions}
}

func principalOf(k projections.KeyRow) Principal {
	p := Principal{KeyID: k.KeyID, MerchantID: k.MerchantID, Environment: k.Environment, Role: merchant.Role(k.Role),
		Business: k.Business, Country: k.Country, Allowlist: k.Allowlist}
	if k.ExpiresAt != nil {
		p.ExpiresAt = *k.ExpiresAt
	}
	return p
}

// ResolveAt reads the key, and the customer when one is named, with the
// position the read models cover, in one query.
func (d QueriesDirectory) ResolveAt(ctx context.Context, digest, customerID string) (ResolvedAuth, error) {
	a, err := d.Q.KeyAndCustomerAt(ctx, digest, customerID)
	if err != nil || !a.KeyFound {
		return ResolvedAuth{}, err
	}
	r := ResolvedAuth{Principal: principalOf(a.Key), Found: true, Covers: a.Covers, Covered: a.Covered}
	if a.CustomerFound {
		r.Customer, r.CustomerFound = customerRefOf(a.Customer), true
	}
	return r, nil
}
