package main

import (
	"context"
	"testing"
	"time"

	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/projections"
)

// The resumer's list answers nothing, not an error, while the ledger read
// model of this version is not created yet (an API process upgraded
// before the projector role), and lists once it is.
func TestPayoutsInFlightBeforeTheLedgerProjectorRan(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	find := payoutsInFlight(projections.NewQueries(pool, nil))
	if got, err := find(ctx, app.PayoutRef{}, time.Now(), 10); err != nil || len(got) != 0 {
		t.Fatalf("without the table: %v, %v; want nothing, no error", got, err)
	}
	if _, err := pool.Exec(ctx, projections.Ledger{}.Schema()); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO rm_payouts_in_flight VALUES ('m1', 'test', 'wd-1', now() - interval '2 minutes')`); err != nil {
		t.Fatal(err)
	}
	got, err := find(ctx, app.PayoutRef{}, time.Now().Add(-time.Minute), 10)
	if err != nil || len(got) != 1 || got[0].MerchantID != "m1" || got[0].Reference != "wd-1" || got[0].Environment != "test" {
		t.Fatalf("with the table: %+v, %v", got, err)
	}
}
