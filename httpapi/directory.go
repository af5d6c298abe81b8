package httpapi

import (
	"context"

	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/projections"
)

// QueriesDirectory resolves keys and customers from the read models.
type QueriesDirectory struct{ Q *projections.Queries }

// Resolve reads the key, and the customer when one is named, from the read
// models in one query.
func (d QueriesDirectory) Resolve(ctx context.Context, digest, customerID string) (Principal, bool, CustomerRef, bool, error) {
	if customerID == "" {
		k, ok, err := d.Q.KeyByDigest(ctx, digest)
		if !ok || err != nil {
			return Principal{}, ok, CustomerRef{}, false, err
		}
		return principalOf(k), true, CustomerRef{}, false, nil
	}
	k, kok, c, cok, err := d.Q.KeyAndCustomer(ctx, digest, customerID)
	if err != nil || !kok {
		return Principal{}, false, CustomerRef{}, false, err
	}
	return principalOf(k), true, customerRefOf(c), cok, nil
}

func customerRefOf(c projections.CustomerAuth) CustomerRef {
	return CustomerRef{ID: c.CustomerID, MerchantID: c.MerchantID, Environment: c.Environment, Blocked: c.Blocked, Permissions: c.Permissions}
}

func principalOf(k projections.KeyRow) Principal {
	return Principal{KeyID: k.KeyID, MerchantID: k.MerchantID, Environment: k.Environment, Role: merchant.Role(k.Role),
		Business: k.Business, Country: k.Country, Allowlist: k.Allowlist}
}

// ResolveAt is Resolve with the position the read models cover, in the same
// query, for the auth cache.
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
