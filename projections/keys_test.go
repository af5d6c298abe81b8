package projections

import (
	"context"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/internal/app"
)

// Both key lookups of the auth path (without and with a customer) agree on
// which keys authenticate: a live key resolves to the same row by either,
// a revoked one by neither.
func TestKeyLookupsAgree(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	svc := app.NewService(app.NewEngine(e.store, 100))
	digest := func(k string) string { return "d-" + k }
	m, err := svc.CreateMerchant(ctx, "Shop", true, "NG", digest)
	if err != nil {
		t.Fatal(err)
	}
	live, gone := m.Keys[0], m.Keys[1]
	last, err := svc.UpdateMerchant(ctx, m.MerchantID, func(s merchant.State) ([]domain.Event, error) {
		return merchant.RevokeKey(s, gone.KeyID, svc.Engine.Now())
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := CatchUpTo(ctx, e.store, e.pool, e.log, last, Merchants{}, Customers{}); err != nil {
		t.Fatal(err)
	}
	q := NewQueries(e.pool)
	for _, c := range []struct {
		key  app.IssuedKey
		want bool
	}{{live, true}, {gone, false}} {
		k1, ok1, err := q.KeyByDigest(ctx, digest(c.key.Key))
		if err != nil {
			t.Fatal(err)
		}
		k2, ok2, _, cok, err := q.KeyAndCustomer(ctx, digest(c.key.Key), "cus_none")
		if err != nil {
			t.Fatal(err)
		}
		if ok1 != c.want || ok2 != c.want || cok {
			t.Fatalf("key %s: found %v alone, %v with a customer (customer %v); want %v", c.key.KeyID, ok1, ok2, cok, c.want)
		}
		if c.want && (k1.KeyID != c.key.KeyID || k1.MerchantID != m.MerchantID || k1.Environment != c.key.Environment ||
			k1.Role != string(c.key.Role) || k1.Country != "NG" || !k1.Business) {
			t.Fatalf("key row %+v for %+v", k1, c.key)
		}
		if k1.KeyID != k2.KeyID || k1.MerchantID != m.MerchantID && c.want || k1.Environment != k2.Environment ||
			k1.Role != k2.Role || k1.Business != k2.Business || k1.Country != k2.Country || len(k1.Allowlist) != len(k2.Allowlist) {
			t.Fatalf("the lookups disagree: %+v alone, %+v with a customer", k1, k2)
		}
	}
}
