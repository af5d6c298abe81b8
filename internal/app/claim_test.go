package app

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// A claim's writes and a takeover's fence race for the claim stream's
// first event: whichever comes first decides, for good.
func TestClaimFence(t *testing.T) {
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
		wrote, err := engine.FenceClaim(ctx, []byte(owner), "k", "idem", domain.Meta{})
		if err != nil {
			t.Fatal(err)
		}
		return wrote
	}

	t.Run("writes are stamped in order; a fence after them reports the write and lets the request finish", func(t *testing.T) {
		claim := NewClaim([]byte("owner-a"), "k", "idem")
		cctx := WithClaim(ctx, claim)
		if claim.Wrote() {
			t.Fatal("a fresh claim reports a write")
		}
		for range 2 {
			if err := write(cctx, "a"); err != nil {
				t.Fatal(err)
			}
		}
		if !claim.Wrote() {
			t.Fatal("the claim does not know it wrote")
		}
		got := streamTypes(t, store, claimStream([]byte("owner-a")))
		if want := []string{"idempotency.write", "idempotency.write"}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("claim stream %v, want %v", got, want)
		}
		if !fence("owner-a") {
			t.Fatal("fencing a claim that wrote reports no write")
		}
		// The request that wrote is the one execution: it may finish.
		if err := write(cctx, "a"); err != nil {
			t.Fatalf("write of a claim that wrote before the fence: %v", err)
		}
	})

	t.Run("a fence before any write stops every later write", func(t *testing.T) {
		claim := NewClaim([]byte("owner-b"), "k", "idem")
		if fence("owner-b") {
			t.Fatal("fencing a claim that never wrote reports a write")
		}
		if fence("owner-b") {
			t.Fatal("a second fence mistakes the first for a write")
		}
		for range 2 {
			if err := write(WithClaim(ctx, claim), "b"); !errors.Is(err, ErrClaimLost) {
				t.Fatalf("write of a fenced claim: %v, want ErrClaimLost", err)
			}
		}
		if claim.Wrote() {
			t.Fatal("a fenced claim reports a write")
		}
		if got := streamTypes(t, store, WalletKind.StreamName("b")); len(got) != 0 {
			t.Fatalf("a fenced claim wrote %v", got)
		}
	})
}
