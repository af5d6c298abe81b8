package sealing_test

import (
	"context"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/keyring"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/internal/sealing"
)

// TestValuesSealWhereTheyAreKept: a value sealed for a place opens there
// to what was sealed, holds nothing of it in plain text, and opens
// nowhere else; an empty value and one never sealed read as they are; once
// the owner's key is destroyed the value reads Erased and a new one is
// kept as Erased.
func TestValuesSealWhereTheyAreKept(t *testing.T) {
	ctx := context.Background()
	store := postgres.New(pgtest.NewPool(t))
	t.Cleanup(store.Close)
	ring := newKeyring(t, store)
	v := sealing.NewValues(ring)
	owner := domain.CustomerData("c_ada")

	sealed, err := v.Seal(ctx, owner, "rm_customers.email", "ada@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if !domain.IsSealed(sealed) || strings.Contains(sealed, "ada@example.com") {
		t.Fatalf("sealed as %q", sealed)
	}
	if again, _ := v.Seal(ctx, owner, "rm_customers.email", "ada@example.com"); again == sealed {
		t.Fatal("two sealings of one value are equal: the nonce is not fresh")
	}
	if got, err := v.Open(ctx, "rm_customers.email", sealed); err != nil || got != "ada@example.com" {
		t.Fatalf("opened %q, %v", got, err)
	}
	if got, err := v.Open(ctx, "rm_customers.phone", sealed); err == nil {
		t.Fatalf("a value moved to another place opens: %q", got)
	}
	if got, err := v.Seal(ctx, owner, "rm_customers.dob", ""); err != nil || got != "" {
		t.Fatalf("empty sealed as %q, %v", got, err)
	}
	if got, err := v.Open(ctx, "rm_customers.email", "plain@example.com"); err != nil || got != "plain@example.com" {
		t.Fatalf("a value never sealed opens as %q, %v", got, err)
	}

	if _, err := ring.Destroy(ctx, keyring.Customer("c_ada")); err != nil {
		t.Fatal(err)
	}
	if got, err := v.Open(ctx, "rm_customers.email", sealed); err != nil || got != domain.Erased {
		t.Fatalf("after the key is destroyed: %q, %v", got, err)
	}
	if got, err := v.Seal(ctx, owner, "rm_customers.email", "ada@example.com"); err != nil || got != domain.Erased {
		t.Fatalf("sealed for a forgotten customer: %q, %v", got, err)
	}
}
