package projections

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/category"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/view"
)

// The category read model lists live categories newest first per tenant,
// survives a repeated application of every event (a deletion is never
// undone by a replayed create or edit) and a rebuild gives the same rows.
func TestCategoriesProjection(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	svc, actor := e.service(t)
	live := actor
	live.Environment = domain.Live
	var ids []string
	var last eventstore.Position
	for i := 0; i < 5; i++ {
		id, pos, err := svc.CreateCategory(ctx, actor, category.New{Name: fmt.Sprint("Cat ", i), Description: fmt.Sprint("about ", i)}, 0)
		if err != nil {
			t.Fatal(err)
		}
		ids, last = append(ids, id), pos
	}
	liveID, _, err := svc.CreateCategory(ctx, live, category.New{Name: "Cat 0"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	name, desc := "Renamed", ""
	if _, err := svc.UpdateCategory(ctx, actor, ids[3], category.Edit{Name: &name, Description: &desc}, 0); err != nil {
		t.Fatal(err)
	}
	// Edited then deleted: a replayed edit must not revive it.
	if _, err := svc.UpdateCategory(ctx, actor, ids[1], category.Edit{Name: &name}, 0); err == nil {
		t.Fatal("duplicate name accepted")
	}
	if _, err := svc.UpdateCategory(ctx, actor, ids[1], category.Edit{Description: &name}, 0); err != nil {
		t.Fatal(err)
	}
	if last, err = svc.DeleteCategory(ctx, actor, ids[1]); err != nil {
		t.Fatal(err)
	}
	if err := CatchUpTo(ctx, e.store, e.pool, e.log, last, Categories{}); err != nil {
		t.Fatal(err)
	}
	q := NewQueries(e.pool)
	list := func(env domain.Environment, p view.Page) ([]view.Category, view.Pagination) {
		t.Helper()
		got, pg, err := q.ListCategories(ctx, actor.MerchantID, env, p)
		if err != nil {
			t.Fatal(err)
		}
		return got, pg
	}
	all := view.Page{Page: 1, Limit: 100}
	want, pg := list(domain.Test, all)
	var gotIDs []string
	for _, c := range want {
		gotIDs = append(gotIDs, c.ID)
	}
	if fmt.Sprint(gotIDs) != fmt.Sprint([]string{ids[4], ids[3], ids[2], ids[0]}) || pg.Count != 4 {
		t.Fatalf("ids %v (%+v), want newest first without the deleted one (created %v)", gotIDs, pg, ids)
	}
	if c := want[1]; c.Name != "Renamed" || c.Description != "" || !c.UpdatedAt.After(c.CreatedAt) {
		t.Fatalf("edited record %+v", c)
	}
	if c := want[0]; c.Name != "Cat 4" || c.Description != "about 4" || c.MerchantID != actor.MerchantID ||
		c.Environment != "test" || c.CreatedAt != c.UpdatedAt || c.CreatedAt.Location().String() != "UTC" {
		t.Fatalf("record %+v", c)
	}
	got, ok, err := q.CategoryByID(ctx, ids[0])
	if err != nil || !ok || !reflect.DeepEqual(got, want[3]) {
		t.Fatalf("by id %+v %v %v, want %+v", got, ok, err, want[3])
	}
	for _, gone := range []string{ids[1], "unknown"} {
		if _, ok, err := q.CategoryByID(ctx, gone); ok || err != nil {
			t.Fatalf("%s found (%v)", gone, err)
		}
	}

	// Paging.
	page2, pg := list(domain.Test, view.Page{Page: 2, Limit: 3})
	if len(page2) != 1 || page2[0].ID != ids[0] || pg.Pages != 2 || !pg.IsLastPage || pg.PreviousPage == nil || *pg.PreviousPage != 1 {
		t.Fatalf("page 2: %+v %+v", page2, pg)
	}
	// Tenancy.
	if got, pg := list(domain.Live, all); len(got) != 1 || got[0].ID != liveID || pg.Count != 1 {
		t.Fatalf("live %+v", got)
	}
	if got, _, err := q.ListCategories(ctx, "other", domain.Test, all); err != nil || len(got) != 0 {
		t.Fatalf("other merchant %v %v", got, err)
	}

	// Apply the whole log once more, out of the runner: nothing changes.
	reapplyAll(t, e, Categories{})
	if got, _ := list(domain.Test, all); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a replay %+v, want %+v", got, want)
	}

	if err := Rebuild(ctx, e.pool, e.store, Categories{}, e.log, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := list(domain.Test, all); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a rebuild %+v, want %+v", got, want)
	}
}
