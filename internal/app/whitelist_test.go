package app

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/whitelist"
)

func bscAddress(i int) string { return fmt.Sprintf("0x%040x", i+1) }

// Concurrent adds on two instances never pass the limit or the duplicate
// rule: the whole list is one stream checked at its expected revision.
func TestWhitelistRulesHoldUnderRaces(t *testing.T) {
	ctx := context.Background()
	a, b, store, actor := twoInstances(t)
	cid, _, err := a.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "Ada", Lastname: "Obi", Email: "a@x.co", Phone: "08031234567"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 14
	outcomes := raceOnTwo(a, b, n, func(i int, svc *Service) error {
		// Pairs race on one address spelled in two cases.
		addr := bscAddress(i / 2)
		if i%2 == 1 {
			addr = "0x" + strings.ToUpper(addr[2:])
		}
		_, _, err := svc.AddWhitelistAddress(ctx, actor, cid, whitelist.NewAddress{WalletAddress: addr, Network: "BSC"})
		return err
	})
	// No "Whitelist limit reached": 7 addresses fit.
	if want := map[string]int{"ok": n / 2, "invalid: Address already whitelisted": n / 2}; !reflect.DeepEqual(outcomes, want) {
		t.Fatalf("outcomes %v, want %v", outcomes, want)
	}
	for i := n / 2; i < 12; i++ {
		_, _, err := a.AddWhitelistAddress(ctx, actor, cid, whitelist.NewAddress{WalletAddress: bscAddress(100 + i), Network: "BSC"})
		if want := i < 10; (err == nil) != want {
			t.Fatalf("add %d: %v", i, err)
		}
		if i >= 10 && domain.ErrorMessage(err) != "Whitelist limit reached" {
			t.Fatalf("add %d: %v", i, err)
		}
	}
	st, _, err := Load(ctx, b.Engine, WhitelistKind, cid)
	if err != nil || len(st.Addresses) != whitelist.MaxAddresses {
		t.Fatalf("whitelist %d addresses (%v)", len(st.Addresses), err)
	}
	if got := len(streamTypes(t, store, WhitelistKind.StreamName(cid))); got != whitelist.MaxAddresses {
		t.Fatalf("%d events in the stream", got)
	}
	// Remove on one instance frees a slot for the other, whose cached list is
	// stale: a refusal ("Whitelist limit reached") must be re-decided fresh.
	removed, _, err := b.RemoveWhitelistAddress(ctx, actor, cid, st.Addresses[0].ID)
	if err != nil || removed.WalletAddress != st.Addresses[0].WalletAddress {
		t.Fatalf("remove: %+v %v", removed, err)
	}
	got, _, err := a.AddWhitelistAddress(ctx, actor, cid, whitelist.NewAddress{WalletAddress: bscAddress(500), Network: "bsc", Label: "cold"})
	if err != nil || got.ID == "" || got.Network != "BSC" || got.Label != "cold" || got.DateAdded.IsZero() || got.LastUpdated != got.DateAdded {
		t.Fatalf("add after remove: %+v %v", got, err)
	}
	// Likewise "Address not found" on a cache that misses another instance's add.
	if _, _, err := b.RemoveWhitelistAddress(ctx, actor, cid, got.ID); err != nil {
		t.Fatalf("remove an address the other instance added: %v", err)
	}
	if _, _, err := a.RemoveWhitelistAddress(ctx, actor, cid, st.Addresses[0].ID); domain.ErrorCode(err) != domain.NotFound ||
		domain.ErrorMessage(err) != "Address not found" {
		t.Fatalf("remove twice: %v", err)
	}
}

// Another merchant's (or environment's) customer is not found.
func TestWhitelistOfForeignCustomer(t *testing.T) {
	ctx := context.Background()
	a, _, store, actor := twoInstances(t)
	cid, _, err := a.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "Ada", Lastname: "Obi", Email: "a@x.co", Phone: "08031234567"})
	if err != nil {
		t.Fatal(err)
	}
	live := actor
	live.Environment = domain.Live
	other := Actor{MerchantID: "someone-else", Environment: domain.Test, KeyID: "k"}
	for _, who := range []Actor{live, other} {
		_, _, err := a.AddWhitelistAddress(ctx, who, cid, whitelist.NewAddress{WalletAddress: bscAddress(1), Network: "BSC"})
		if domain.ErrorCode(err) != domain.NotFound || domain.ErrorMessage(err) != "Customer not found" {
			t.Fatalf("%+v: %v", who, err)
		}
		if _, _, err := a.RemoveWhitelistAddress(ctx, who, cid, "x"); domain.ErrorMessage(err) != "Customer not found" {
			t.Fatalf("%+v remove: %v", who, err)
		}
	}
	if evs := streamTypes(t, store, WhitelistKind.StreamName(cid)); len(evs) != 0 {
		t.Fatalf("events appended: %v", evs)
	}
}
