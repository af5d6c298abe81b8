package projections

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/whitelist"
	"github.com/escrowd/escrowd/eventstore"
)

// The whitelist read model lists live addresses newest first, survives a
// repeated application of every event (a removal is never undone by a
// replayed add) and a rebuild from position zero gives the same rows.
func TestWhitelistProjection(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	svc, actor := e.service(t)
	cust := func(email, phone string) string {
		id, _, err := svc.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "Ada", Lastname: "Obi", Email: email, Phone: phone})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	c1, c2 := cust("a@x.co", "08031234567"), cust("b@x.co", "08031234568")
	var ids []string
	var last eventstore.Position
	for i := 0; i < 4; i++ {
		a, pos, err := svc.AddWhitelistAddress(ctx, actor, c1, whitelist.NewAddress{
			WalletAddress: fmt.Sprintf("0x%040X", i+1), Network: "BSC", Label: fmt.Sprint("label ", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids, last = append(ids, a.ID), pos
	}
	if _, _, err := svc.AddWhitelistAddress(ctx, actor, c2, whitelist.NewAddress{WalletAddress: fmt.Sprintf("0x%040x", 1), Network: "BSC"}); err != nil {
		t.Fatal(err)
	}
	_, last, err := svc.RemoveWhitelistAddress(ctx, actor, c1, ids[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := CatchUpTo(ctx, e.store, e.pool, e.log, last, Whitelist{}); err != nil {
		t.Fatal(err)
	}
	q := NewQueries(e.pool, nil)
	list := func() []WhitelistAddress {
		t.Helper()
		got, err := q.WhitelistAddresses(ctx, actor.MerchantID, domain.Test, c1)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	want := list()
	var gotIDs []string
	for _, a := range want {
		gotIDs = append(gotIDs, a.ID)
	}
	if fmt.Sprint(gotIDs) != fmt.Sprint([]string{ids[3], ids[2], ids[0]}) {
		t.Fatalf("ids %v, want newest first without the removed one (added %v)", gotIDs, ids)
	}
	if a := want[0]; a.WalletAddress != fmt.Sprintf("0x%040X", 4) || a.Network != "BSC" || a.Label != "label 3" ||
		a.DateAdded.IsZero() || a.DateAdded != a.LastUpdated || a.DateAdded.Location().String() != "UTC" {
		t.Fatalf("record %+v", a)
	}
	removed, ok, err := q.WhitelistAddressByID(ctx, c1, ids[1])
	if err != nil || !ok || !removed.LastUpdated.After(removed.DateAdded) {
		t.Fatalf("removed record %+v %v %v", removed, ok, err)
	}
	if _, ok, _ := q.WhitelistAddressByID(ctx, c2, ids[0]); ok {
		t.Fatal("another customer's address found")
	}
	// Tenancy is matched too.
	for _, other := range []struct {
		merchant string
		env      domain.Environment
	}{{actor.MerchantID, domain.Live}, {"other", domain.Test}} {
		if got, err := q.WhitelistAddresses(ctx, other.merchant, other.env, c1); err != nil || len(got) != 0 {
			t.Fatalf("%v: %v %v", other, got, err)
		}
	}

	// Apply the whole log once more, out of the runner: nothing changes.
	reapplyAll(t, e, Whitelist{})
	if got := list(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a replay %+v, want %+v", got, want)
	}

	if err := Rebuild(ctx, e.pool, e.store, Whitelist{}, e.log, nil); err != nil {
		t.Fatal(err)
	}
	if got := list(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a rebuild %+v, want %+v", got, want)
	}
}
