package app

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/category"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/eventstore"
)

// Concurrent creates of one name (in any case) on two instances make one
// category; a rename or a delete frees the name for the other instance,
// whose cached reservation is stale.
func TestCategoryNamesUniqueAcrossInstances(t *testing.T) {
	ctx := context.Background()
	a, b, store, actor := twoInstances(t)
	const n = 10
	created := make([]string, n)
	got := raceOnTwo(a, b, n, func(i int, svc *Service) error {
		name := "Food"
		if i%3 == 1 {
			name = " FOOD "
		}
		id, _, err := svc.CreateCategory(ctx, actor, category.New{Name: name}, 0)
		if err == nil {
			created[i] = id
		}
		return err
	})
	if want := map[string]int{"ok": 1, "invalid: A category with this name already exists": n - 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	var food string
	for _, id := range created {
		if id != "" {
			food = id
		}
	}
	foodKey := category.NameKey(actor.MerchantID, actor.Environment, "food")
	if got := streamTypes(t, store, ReservationKind.StreamName(foodKey)); fmt.Sprint(got) != "[reservation.claimed]" {
		t.Fatalf("reservation %v", got)
	}

	// A change of case keeps the reservation.
	if _, err := b.UpdateCategory(ctx, actor, food, category.Edit{Name: ptr("fOOD")}, 0); err != nil {
		t.Fatal(err)
	}
	if got := streamTypes(t, store, ReservationKind.StreamName(foodKey)); fmt.Sprint(got) != "[reservation.claimed]" {
		t.Fatalf("reservation after a change of case %v", got)
	}
	// Both instances still refuse the name (a's cache saw only the reservation).
	for _, svc := range []*Service{a, b} {
		if _, _, err := svc.CreateCategory(ctx, actor, category.New{Name: "food"}, 0); domain.ErrorMessage(err) != "A category with this name already exists" {
			t.Fatalf("duplicate after a change of case: %v", err)
		}
	}

	// Renamed on b: a takes the old name at once.
	if _, err := b.UpdateCategory(ctx, actor, food, category.Edit{Name: ptr("Drinks"), Description: ptr("Cold")}, 0); err != nil {
		t.Fatal(err)
	}
	food2, _, err := a.CreateCategory(ctx, actor, category.New{Name: "Food"}, 0)
	if err != nil {
		t.Fatalf("old name not freed by the rename: %v", err)
	}
	if _, _, err := a.CreateCategory(ctx, actor, category.New{Name: "DRINKS"}, 0); domain.ErrorMessage(err) != "A category with this name already exists" {
		t.Fatalf("new name not reserved: %v", err)
	}
	// Renaming onto a taken name is refused and changes nothing.
	if _, err := a.UpdateCategory(ctx, actor, food2, category.Edit{Name: ptr("drinks"), Description: ptr("x")}, 0); domain.ErrorMessage(err) != "A category with this name already exists" {
		t.Fatalf("rename onto a taken name: %v", err)
	}
	st, _, err := Load(ctx, b.Engine, CategoryKind, food)
	if err != nil || st.Name != "Drinks" || st.Description != "Cold" || !st.Exists() {
		t.Fatalf("renamed state %+v %v", st, err)
	}
	if st, _, _ := Load(ctx, b.Engine, CategoryKind, food2); st.Description != "" {
		t.Fatalf("refused edit applied: %+v", st)
	}

	// An edit that changes nothing appends nothing.
	pos, err := a.UpdateCategory(ctx, actor, food, category.Edit{Name: ptr("Drinks ")}, 0)
	if err != nil || pos != (eventstore.Position{}) {
		t.Fatalf("no-op edit: %v %v", pos, err)
	}

	// Deleted on a: b (which cached "Drinks" as held) takes the name.
	if _, err := a.DeleteCategory(ctx, actor, food); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.CreateCategory(ctx, actor, category.New{Name: "drinks"}, 0); err != nil {
		t.Fatalf("name not freed by the delete: %v", err)
	}
	want := "[category.created category.updated category.updated category.deleted]"
	if got := streamTypes(t, store, CategoryKind.StreamName(food)); fmt.Sprint(got) != want {
		t.Fatalf("stream %v, want %s", got, want)
	}
	for _, svc := range []*Service{a, b} {
		if _, err := svc.DeleteCategory(ctx, actor, food); domain.ErrorCode(err) != domain.NotFound || domain.ErrorMessage(err) != "Category not found" {
			t.Fatalf("delete twice: %v", err)
		}
		if _, err := svc.UpdateCategory(ctx, actor, food, category.Edit{Name: ptr("x")}, 0); domain.ErrorCode(err) != domain.NotFound {
			t.Fatalf("edit deleted: %v", err)
		}
	}
}

// Another merchant's or environment's category is not found, and nothing
// is appended for it.
func TestCategoryOfForeignTenant(t *testing.T) {
	ctx := context.Background()
	a, _, store, actor := twoInstances(t)
	id, _, err := a.CreateCategory(ctx, actor, category.New{Name: "Food"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	live := actor
	live.Environment = domain.Live
	other := Actor{MerchantID: "someone-else", Environment: domain.Test, KeyID: "k"}
	for _, who := range []Actor{live, other} {
		if _, err := a.UpdateCategory(ctx, who, id, category.Edit{Name: ptr("x")}, 0); domain.ErrorCode(err) != domain.NotFound ||
			domain.ErrorMessage(err) != "Category not found" {
			t.Fatalf("%+v edit: %v", who, err)
		}
		if _, err := a.DeleteCategory(ctx, who, id); domain.ErrorMessage(err) != "Category not found" {
			t.Fatalf("%+v delete: %v", who, err)
		}
		_, err := a.Engine.Do(ctx, who.meta(), func(tx *Tx) error {
			_, err := a.OwnCategory(tx, who, id)
			return err
		})
		if domain.ErrorMessage(err) != "Category not found" {
			t.Fatalf("%+v OwnCategory: %v", who, err)
		}
		// The same name is free for them.
		if _, _, err := a.CreateCategory(ctx, who, category.New{Name: "FOOD"}, 0); err != nil {
			t.Fatalf("%+v create: %v", who, err)
		}
	}
	if got := streamTypes(t, store, CategoryKind.StreamName(id)); fmt.Sprint(got) != "[category.created]" {
		t.Fatalf("stream %v", got)
	}
	// Validation comes before any read.
	if _, _, err := a.CreateCategory(ctx, actor, category.New{Name: strings.Repeat("x", 101)}, 0); domain.ErrorMessage(err) != "name must be at most 100 characters" {
		t.Fatalf("long name: %v", err)
	}
	if _, err := a.UpdateCategory(ctx, actor, id, category.Edit{}, 0); domain.ErrorMessage(err) != "Provide name or description" {
		t.Fatalf("empty edit: %v", err)
	}
}

// OwnCategory inside another command: a deletion racing the command makes
// its append conflict, and the retry, on fresh state, refuses; on both
// stores (the category is guarded, not written: on KurrentDB that is a
// consistency check of the append).
func TestOwnCategoryGuardsTheCommand(t *testing.T) {
	onBothStores(t, testOwnCategoryGuardsTheCommand)
}

func testOwnCategoryGuardsTheCommand(t *testing.T, a, b *Service, store eventstore.Store, actor Actor) {
	ctx := context.Background()
	id, _, err := a.CreateCategory(ctx, actor, category.New{Name: "Food", Description: "Groceries"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "unknown"} {
		_, err := a.Engine.Do(ctx, actor.meta(), func(tx *Tx) error { _, err := a.OwnCategory(tx, actor, bad); return err })
		if domain.ErrorCode(err) != domain.NotFound || domain.ErrorMessage(err) != "Category not found" {
			t.Fatalf("OwnCategory(%q): %v", bad, err)
		}
	}
	// A command that only references the category appends nothing to it.
	const marker = "marker"
	_, err = a.Engine.Do(ctx, actor.meta(), func(tx *Tx) error {
		c, err := a.OwnCategory(tx, actor, id)
		if err != nil {
			return err
		}
		if c.Name != "Food" || c.Description != "Groceries" || c.MerchantID != actor.MerchantID {
			t.Errorf("state %+v", c)
		}
		Record(tx, ReservationKind, marker+"-1", customer.ReservationTaken{Holder: c.ID})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := streamTypes(t, store, CategoryKind.StreamName(id)); fmt.Sprint(got) != "[category.created]" {
		t.Fatalf("category stream %v", got)
	}
	attempts := 0
	_, err = a.Engine.Do(ctx, actor.meta(), func(tx *Tx) error {
		attempts++
		if _, err := a.OwnCategory(tx, actor, id); err != nil {
			return err
		}
		if attempts == 1 {
			if _, err := b.DeleteCategory(ctx, actor, id); err != nil {
				t.Fatal(err)
			}
		}
		Record(tx, ReservationKind, marker+"-2", customer.ReservationTaken{Holder: id})
		return nil
	})
	if domain.ErrorMessage(err) != "Category not found" || attempts != 2 {
		t.Fatalf("after a racing delete: %v (%d attempts)", err, attempts)
	}
	if got := streamTypes(t, store, ReservationKind.StreamName(marker+"-2")); len(got) != 0 {
		t.Fatalf("command appended %v", got)
	}
}
