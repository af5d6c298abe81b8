package app

import (
	"context"
	"errors"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// A merchant that is not a business cannot sell as itself, by any way of
// creating an escrow: the application is the one place this is checked
// (httpapi passes the request on), and a business merchant may.
func TestOnlyABusinessMerchantSellsAsItself(t *testing.T) {
	ctx := context.Background()
	store := postgres.New(pgtest.NewPool(t))
	t.Cleanup(store.Close)
	svc := NewService(NewEngine(store, 100))
	actorOf := func(business bool) Actor {
		m, err := svc.CreateMerchant(ctx, "Shop", business, "NG", digest)
		if err != nil {
			t.Fatal(err)
		}
		return Actor{MerchantID: m.MerchantID, Environment: domain.Test, KeyID: "k"}
	}
	d := escrow.Draft{Amount: money.Naira(2000), Purpose: "Shoes", WhoPays: "buyer"}
	ms := []escrow.MilestoneDraft{{Title: "one", Amount: money.Naira(1000)}, {Title: "two", Amount: money.Naira(1000)}}
	create := map[string]func(a Actor) error{
		"standard": func(a Actor) error { _, err := svc.CreateEscrow(ctx, a, "", d); return err },
		"milestones": func(a Actor) error {
			_, err := svc.CreateMilestoneEscrow(ctx, a, "", escrow.Draft{Amount: d.Amount, Purpose: d.Purpose}, ms)
			return err
		},
	}
	individual, business := actorOf(false), actorOf(true)
	for name, f := range create {
		if err := f(individual); !errors.Is(err, ErrMerchantCannotSell) {
			t.Errorf("%s by an individual merchant: %v, want %v", name, err, ErrMerchantCannotSell)
		}
		if err := f(business); err != nil {
			t.Errorf("%s by a business merchant: %v", name, err)
		}
	}
}
