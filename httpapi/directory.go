package httpapi

import (
	"context"

	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/projections"
)

// QueriesDirectory resolves keys and customers from the read models.
type QueriesDirectory struct{ Q *projections.Queries }

func (d QueriesDirectory) KeyByDigest(ctx context.Context, digest string) (Principal, bool, error) {
	k, ok, err := d.Q.KeyByDigest(ctx, digest)
	if !ok || err != nil {
		return Principal{}, ok, err
	}
	return principalOf(k), true, nil
}

func principalOf(k projections.KeyRow) Principal {
	return Principal{KeyID: k.KeyID, MerchantID: k.MerchantID, Environment: k.Environment, Role: merchant.Role(k.Role),
		Business: k.Business, Country: k.Country, Allowlist: k.Allowlist}
}

// KeyAndCustomer resolves both in one query (see CombinedDirectory).
func (d QueriesDirectory) KeyAndCustomer(ctx context.Context, digest, customerID string) (Principal, bool, CustomerRef, bool, error) {
	k, kok, c, cok, err := d.Q.KeyAndCustomer(ctx, digest, customerID)
	if err != nil || !kok {
		return Principal{}, false, CustomerRef{}, false, err
	}
	ref := CustomerRef{ID: c.CustomerID, MerchantID: c.MerchantID, Environment: c.Environment, Blocked: c.Blocked, Permissions: c.Permissions}
	return principalOf(k), true, ref, cok, nil
}

func (d QueriesDirectory) CustomerRef(ctx context.Context, id string) (CustomerRef, bool, error) {
	c, ok, err := d.Q.CustomerByID(ctx, id)
	if !ok || err != nil {
		return CustomerRef{}, ok, err
	}
	return CustomerRef{ID: c.CustomerID, MerchantID: c.MerchantID, Environment: domainEnv(c.Environment),
		Blocked: c.Status == "blocked", Permissions: c.Permissions}, true, nil
}
