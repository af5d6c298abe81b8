package projections

import (
	"context"
	"fmt"
	"reflect"
	"strings"
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
	q := NewQueries(e.pool, nil)
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

// A create and the order that places it are one append. The store gives
// its events in stream-name order (the category before categoryorder); a
// projector that depended on it would break with a stream renamed or a
// store that orders otherwise, so the projection is checked with each
// order set before its category's creation, applied in one batch and one
// event at a time: the newest category is still first.
func TestCategoryPlacedWhateverTheOrderOfItsAppend(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	svc, actor := e.service(t)
	var ids []string
	var last eventstore.Position
	for i := range 3 {
		id, pos, err := svc.CreateCategory(ctx, actor, category.New{Name: fmt.Sprint("Cat ", i)}, 0)
		if err != nil {
			t.Fatal(err)
		}
		ids, last = append(ids, id), pos
	}
	visible(t, e.store, last)
	events, err := e.store.ReadAll(ctx, eventstore.Start, 1000)
	if err != nil {
		t.Fatal(err)
	}
	swapped := 0
	for i := 0; i+1 < len(events); i++ {
		if strings.HasPrefix(events[i].Stream, "category-") && strings.HasPrefix(events[i+1].Stream, "categoryorder-") {
			events[i], events[i+1] = events[i+1], events[i]
			swapped++
			i++
		}
	}
	if swapped != 3 {
		t.Fatalf("%d creations followed by their order in the log, want 3", swapped)
	}
	for _, batch := range []int{len(events), 1} {
		if _, err := e.pool.Exec(ctx, `DROP TABLE IF EXISTS rm_categories, rm_category_orders, rm_category_counts`); err != nil {
			t.Fatal(err)
		}
		if _, err := e.pool.Exec(ctx, Categories{}.Schema()); err != nil {
			t.Fatal(err)
		}
		for from := 0; from < len(events); from += batch {
			tx, err := e.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := (Categories{}).Apply(ctx, tx, events[from:min(from+batch, len(events))]); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		got, _, err := NewQueries(e.pool, nil).ListCategories(ctx, actor.MerchantID, domain.Test, view.Page{Page: 1, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var listed []string
		for _, c := range got {
			listed = append(listed, fmt.Sprintf("%s@%d", c.ID, c.Position))
		}
		want := []string{ids[2] + "@1", ids[1] + "@2", ids[0] + "@3"}
		if fmt.Sprint(listed) != fmt.Sprint(want) {
			t.Fatalf("batches of %d: listed %v, want %v", batch, listed, want)
		}
	}
}
