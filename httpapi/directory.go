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
	ref := CustomerRef{ID: c.CustomerID, MerchantID: c.MerchantID, Environment: c.Environment, Blocked: c.Blocked, Permissions: c.Permissions}
	return principalOf(k), true, ref, cok, nil
}

func principalOf(k projections.KeyRow) Principal {
	return Principal{KeyID: k.KeyID, MerchantID: k.MerchantID, Environment: k.Environment, Role: merchant.Role(k.Role),
		Business: k.Business, Country: k.Country, Allowlist: k.Allowlist}
}
