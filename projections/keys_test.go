package projections

import (
	"context"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
)

// The auth lookup without and with a customer agrees on
// which keys authenticate: a live key resolves to the same row by either,
// a revoked one by neither.
func TestKeyLookupsAgree(t *testing.T) {
	e, svc, m := newKeysEnv(t)
	ctx := context.Background()
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
	q := NewQueries(e.pool, nil)
	for _, c := range []struct {
		key  app.IssuedKey
		want bool
	}{{live, true}, {gone, false}} {
		a1, err := q.KeyAndCustomerAt(ctx, keyDigest(c.key.Key), "")
		if err != nil {
			t.Fatal(err)
		}
		a2, err := q.KeyAndCustomerAt(ctx, keyDigest(c.key.Key), "cus_none")
		if err != nil {
			t.Fatal(err)
		}
		k1, ok1, k2, ok2, cok := a1.Key, a1.KeyFound, a2.Key, a2.KeyFound, a2.CustomerFound
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

// KeyAndCustomerAt reports what the answer covers: the older of the
// merchants' and customers' checkpoints, read with the rows, and nothing
// while one of them is not stored.
func TestKeyAndCustomerAtCoverage(t *testing.T) {
	e, svc, m := newKeysEnv(t)
	ctx := context.Background()
	head, err := svc.UpdateMerchant(ctx, m.MerchantID, func(merchant.State) ([]domain.Event, error) {
		return []domain.Event{merchant.AllowlistSet{Entries: []string{"10.0.0.1"}}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	q := NewQueries(e.pool, nil)
	key := keyDigest(m.Keys[0].Key)
	if err := CatchUpTo(ctx, e.store, e.pool, e.log, head, Merchants{}, Customers{}); err != nil {
		t.Fatal(err)
	}
	a, err := q.KeyAndCustomerAt(ctx, key, "")
	if err != nil || !a.KeyFound || !a.Covered || a.Covers.Less(head) {
		t.Fatalf("caught up to %v: %+v, %v", head, a, err)
	}
	// Without the customers' checkpoint nothing is covered.
	if _, err := e.pool.Exec(ctx, `DELETE FROM projection_checkpoints WHERE name = $1`, Customers{}.Name()); err != nil {
		t.Fatal(err)
	}
	if a, err := q.KeyAndCustomerAt(ctx, key, ""); err != nil || !a.KeyFound || a.Covered {
		t.Fatalf("with one checkpoint: %+v, %v", a, err)
	}
	if _, err := e.pool.Exec(ctx, `INSERT INTO projection_checkpoints (name) VALUES ($1)`, Customers{}.Name()); err != nil {
		t.Fatal(err)
	}
	set := func(name string, p eventstore.Position) {
		t.Helper()
		if _, err := e.pool.Exec(ctx, `UPDATE projection_checkpoints SET commit_pos = $2, prepare_pos = $3 WHERE name = $1`,
			name, int64(p.Commit), int64(p.Prepare)); err != nil {
			t.Fatal(err)
		}
	}
	older, newer := eventstore.Position{Commit: head.Commit, Prepare: 1}, eventstore.Position{Commit: head.Commit, Prepare: 2}
	for _, c := range []struct{ merchants, customers, want eventstore.Position }{
		{older, newer, older},
		{newer, older, older},
		{newer, eventstore.Position{Commit: head.Commit - 1, Prepare: 9}, eventstore.Position{Commit: head.Commit - 1, Prepare: 9}},
	} {
		set(Merchants{}.Name(), c.merchants)
		set(Customers{}.Name(), c.customers)
		a, err := q.KeyAndCustomerAt(ctx, key, "cus_none")
		if err != nil || !a.KeyFound || a.CustomerFound || !a.Covered || a.Covers != c.want {
			t.Fatalf("merchants at %v, customers at %v: %+v, %v; want covers %v", c.merchants, c.customers, a, err, c.want)
		}
	}
	// An unknown key covers nothing.
	if a, err := q.KeyAndCustomerAt(ctx, "d-unknown", ""); err != nil || a.KeyFound || a.Covered {
		t.Fatalf("unknown key: %+v, %v", a, err)
	}
}

func keyDigest(k string) string { return "d-" + k }

// newKeysEnv is a projection environment with a service on its store and
// one merchant created through it (keys digested by keyDigest).
func newKeysEnv(t *testing.T) (*env, *app.Service, app.CreatedMerchant) {
	t.Helper()
	e := newEnv(t)
	svc := app.NewService(app.NewEngine(e.store, 100))
	m, err := svc.CreateMerchant(context.Background(), "Shop", true, "NG", keyDigest)
	if err != nil {
		t.Fatal(err)
	}
	return e, svc, m
}
