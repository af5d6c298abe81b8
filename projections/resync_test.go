package projections

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
)

// TestLosingApplierAppliesNothing: an applier whose batch starts at a
// checkpoint another applier has moved meanwhile (a standby that took over,
// an operator's catch-up, a rebuild's swap) must not apply that batch at
// all, not even in a transaction that rolls back. Applied over read-model
// rows that are already past the batch, it folds the batch's events in a
// second time, and a projector that remembers what it computed (the escrow
// states, keyed by revision) keeps that wrong state: here the losing
// instance, fresh as after a restart so that it reads the escrow's row,
// later writes the escrow's next event over a state with its payment
// folded in twice.
//
// Both ways of applying are covered: in a transaction (Apply, counted: it
// must not even run) and planned in one pipeline (Escrows is a Planner: it
// reads and plans before it can know it lost, so what it computed must not
// be remembered).
func TestLosingApplierAppliesNothing(t *testing.T) {
	t.Run("transaction", func(t *testing.T) {
		loser := &applyCounter{Projector: NewEscrows()}
		losingApplier(t, loser, func(t *testing.T) {
			if n := loser.calls.Load(); n != 0 {
				t.Errorf("the losing applier's Apply ran %d times over read models past its batch", n)
			}
		})
	})
	t.Run("planned", func(t *testing.T) {
		losingApplier(t, NewEscrows(), func(*testing.T) {})
	})
}

func losingApplier(t *testing.T, loser Projector, checkLost func(*testing.T)) {
	e := newEnv(t)
	ctx := context.Background()
	svc, a, seller, buyer := e.escrowParties(t)
	one := 1
	res, err := svc.CreateEscrow(ctx, a, seller, escrow.Draft{Amount: money.Naira(10000), Purpose: "x", WhoPays: "buyer", TotalQuantity: &one})
	if err != nil {
		t.Fatal(err)
	}
	paid, err := svc.PayEscrows(ctx, a, buyer, allowed, app.EscrowPayment{Reference: "p-1", Amount: res.Escrow.Due(), EscrowIDs: []string{res.Escrow.ID}})
	if err != nil {
		t.Fatal(err)
	}
	last, err := svc.ConfirmEscrow(ctx, a, buyer, paid.Escrows[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	head := visible(t, e.store, last.Position)
	events, err := e.store.ReadAll(ctx, eventstore.Start, 100000)
	if err != nil {
		t.Fatal(err)
	}
	stream := "escrow-" + res.Escrow.ID
	var at []int // indexes of the escrow's events: created, funded, released
	for i, re := range events {
		if re.Stream == stream {
			at = append(at, i)
		}
	}
	if len(at) != 3 {
		t.Fatalf("escrow stream has %d events, want created, funded, released", len(at))
	}

	winner := NewEscrows()
	if _, err := prepare(ctx, e.pool, winner); err != nil {
		t.Fatal(err)
	}
	created, err := applyBatch(ctx, e.pool, winner, eventstore.Start, events[:at[0]+1])
	if err != nil {
		t.Fatal(err)
	}
	// Both got the batch holding the payment; the winner commits it first.
	batch := events[at[0]+1 : at[1]+1]
	if _, err := applyBatch(ctx, e.pool, winner, created, batch); err != nil {
		t.Fatal(err)
	}
	if _, err := applyBatch(ctx, e.pool, loser, created, batch); !errors.Is(err, errResync) {
		t.Fatalf("the losing applier: %v, want errResync", err)
	}
	checkLost(t)
	// The loser re-syncs from the stored checkpoint and goes on: it
	// applies the release.
	if _, err := applyUpTo(ctx, e.store, e.pool, loser, head, 1000, nil); err != nil {
		t.Fatal(err)
	}
	stateOf := func() string {
		t.Helper()
		var s string
		if err := e.pool.QueryRow(ctx, `SELECT state::text FROM rm_escrows WHERE id = $1`, res.Escrow.ID).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	got := stateOf()
	reapplyAll(t, e, NewEscrows()) // the whole log once, by an instance that knows nothing
	if want := stateOf(); got != want {
		t.Fatalf("escrow after the losing applier went on:\n%s\nwant (the log applied once):\n%s", got, want)
	}
	if !strings.Contains(got, string(escrow.Completed)) {
		t.Fatalf("the release was not applied: %s", got)
	}
}
