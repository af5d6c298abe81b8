package sealing_test

import (
	"context"
	"testing"

	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/internal/sealing"
)

// BenchmarkSealCustomerCreated is the codec's CPU for one customer's
// creation: its event sealed once, opened twice (once for all the
// process's subscribers, which share what the first opened, and once by a
// command's load of the customer), and its email's and phone's
// blind indexes, the customer's key cached (the keyring's database is
// not in the loop).
func BenchmarkSealCustomerCreated(b *testing.B) {
	ctx := context.Background()
	raw := postgres.New(pgtest.NewPool(b))
	b.Cleanup(raw.Close)
	ring := newKeyringB(b, raw)
	data := []byte(customerCreated)
	if _, err := sealing.SealEvent(ctx, ring, "customer-c_ada", "customer.created", data, nil); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		sealed, err := sealing.SealEvent(ctx, ring, "customer-c_ada", "customer.created", data, nil)
		if err != nil {
			b.Fatal(err)
		}
		for range 2 {
			if _, err := sealing.OpenEvent(ctx, ring, "customer.created", sealed); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := ring.BlindIndex(ctx, "email", "ada@example.com"); err != nil {
			b.Fatal(err)
		}
		if _, err := ring.BlindIndex(ctx, "phone", "08031234567"); err != nil {
			b.Fatal(err)
		}
	}
}
