package app

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// A reservation's writes and a takeover's fence race for the reservation stream's
// first event: whichever comes first decides, for good.
func TestReservationFence(t *testing.T) {
	store := postgres.New(pgtest.NewPool(t))
	t.Cleanup(store.Close)
	engine := NewEngine(store, 100)
	ctx := context.Background()
	write := func(ctx context.Context, id string) error {
		_, err := engine.Do(ctx, domain.Meta{}, func(tx *Tx) error {
			Append(tx, WalletKind, id, customer.Blocked{Reason: "x"})
			return nil
		})
		return err
	}
	fence := func(owner string) bool {
		t.Helper()
		wrote, err := engine.FenceReservation(ctx, []byte(owner), "k", "idem", domain.Meta{})
		if err != nil {
			t.Fatal(err)
		}
		return wrote
	}

	t.Run("writes are stamped in order; a fence after them reports the write and lets the request finish", func(t *testing.T) {
		reservation := NewReservation([]byte("owner-a"), "k", "idem")
		cctx := WithReservation(ctx, reservation)
		if reservation.Wrote() {
			t.Fatal("a fresh reservation reports a write")
		}
		for range 2 {
			if err := write(cctx, "a"); err != nil {
				t.Fatal(err)
			}
		}
		if !reservation.Wrote() {
			t.Fatal("the reservation does not know it wrote")
		}
		got := streamTypes(t, store, reservationStream([]byte("owner-a")))
		if want := []string{"idempotency.write", "idempotency.write"}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("reservation stream %v, want %v", got, want)
		}
		if !fence("owner-a") {
			t.Fatal("fencing a reservation that wrote reports no write")
		}
		// The request that wrote is the one execution: it may finish.
		if err := write(cctx, "a"); err != nil {
			t.Fatalf("write of a reservation that wrote before the fence: %v", err)
		}
	})

	t.Run("a fence before any write stops every later write", func(t *testing.T) {
		reservation := NewReservation([]byte("owner-b"), "k", "idem")
		if fence("owner-b") {
			t.Fatal("fencing a reservation that never wrote reports a write")
		}
		if fence("owner-b") {
			t.Fatal("a second fence mistakes the first for a write")
		}
		for range 2 {
			if err := write(WithReservation(ctx, reservation), "b"); !errors.Is(err, ErrReservationLost) {
				t.Fatalf("write of a fenced reservation: %v, want ErrReservationLost", err)
			}
		}
		if reservation.Wrote() {
			t.Fatal("a fenced reservation reports a write")
		}
		if got := streamTypes(t, store, WalletKind.StreamName("b")); len(got) != 0 {
			t.Fatalf("a fenced reservation wrote %v", got)
		}
	})

	t.Run("a conflict on the written stream is retried, not taken for a lost reservation", func(t *testing.T) {
		reservation := NewReservation([]byte("owner-c"), "k", "idem")
		cctx := WithReservation(ctx, reservation)
		target := CustomerKind.StreamName("c")
		metaJSON, err := marshalMeta(domain.Meta{})
		if err != nil {
			t.Fatal(err)
		}
		// Each command reads the customer at a checked revision; on its first
		// run another writer appends to the customer between the decision and
		// the append, which then conflicts on the customer stream (not the
		// reservation's): the engine must decide again and write, the reservation intact.
		// The first command is the reservation's first write (the reservation stream
		// expected absent), the second a later one (expected at a revision).
		for i := range 2 {
			runs := 0
			_, err := engine.Do(cctx, domain.Meta{}, func(tx *Tx) error {
				runs++
				if _, err := Read(tx, CustomerKind, "c"); err != nil {
					return err
				}
				if runs == 1 {
					ev, err := eventData(engine, customer.Blocked{Reason: "other writer"}, metaJSON)
					if err != nil {
						return err
					}
					if _, err := store.Append(ctx, eventstore.StreamAppend{Stream: target, Expected: eventstore.Any,
						Events: []eventstore.EventData{ev}}); err != nil {
						return err
					}
				}
				Record(tx, CustomerKind, "c", customer.Blocked{Reason: "x"})
				return nil
			})
			if err != nil {
				t.Fatalf("command %d after a conflict on the customer stream: %v", i, err)
			}
			if runs != 2 {
				t.Fatalf("command %d decided %d times, want 2 (once more after the conflict)", i, runs)
			}
			if !reservation.Wrote() {
				t.Fatalf("command %d: the reservation does not know it wrote", i)
			}
			got := streamTypes(t, store, reservationStream([]byte("owner-c")))
			want := []string{}
			for range i + 1 {
				want = append(want, "idempotency.write")
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("command %d: reservation stream %v, want %v", i, got, want)
			}
			if got := streamTypes(t, store, target); len(got) != 2*(i+1) {
				t.Fatalf("command %d: customer stream %v, want %d events (the other writer's and ours)", i, got, 2*(i+1))
			}
		}
		// The reservation is still held: a fence finds its writes.
		if !fence("owner-c") {
			t.Fatal("fencing the reservation after its retried writes reports no write")
		}
	})
}
