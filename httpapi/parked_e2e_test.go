package httpapi

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/projections"
)

// brokenCategories is the categories projector with a bug: it fails on
// every event it is given until fixed.
type brokenCategories struct {
	projections.Categories
	fixed *atomic.Bool
}

func (b brokenCategories) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error {
	if !b.fixed.Load() {
		return errors.New("categories: a bug in the projector")
	}
	return b.Categories.Apply(ctx, tx, events)
}

// TestAParkedProjectorStopsOnlyItsOwnReads: with the categories projector
// failing on every event, it parks the first category's event; reads of
// the other read models (customers, the wallet) answer normally, reads of
// categories answer 503 at once with a message naming the read model,
// /readyz stays ready and lists it, and once the bug is fixed and an
// operator retries the event the category list answers with it.
func TestAParkedProjectorStopsOnlyItsOwnReads(t *testing.T) {
	ps := projections.All(nil)
	fixed := &atomic.Bool{}
	for i, p := range ps {
		if p.Name() == projections.CategoriesName {
			ps[i] = brokenCategories{fixed: fixed}
		}
	}
	h := startHarnessWith(t, harnessOptions{projectors: ps, parkAfter: 2}, nil)
	// The create answers from the categories read model, which cannot
	// include it: 503, saying the change was saved.
	created := h.do(req{method: "POST", path: "/v1/escrow/category/create", key: h.sa(), body: catBody("Food")})
	if created.Status != 503 || !strings.Contains(created.Message, "saved") {
		t.Fatalf("category create with a broken projector: %d %s", created.Status, created.Raw)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		parked, err := h.runner.Parked(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if parked[projections.CategoriesName] != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the failing projector never parked its event")
		}
		time.Sleep(20 * time.Millisecond)
	}

	h.do(req{method: "POST", path: "/v1/customer/create", key: h.sa(), body: customerBody("ada@example.com", "08031234567")}).expect(t, 201, "")
	list := h.do(req{method: "GET", path: "/v1/customers", key: h.sa()})
	list.expect(t, 200, "")
	if !strings.Contains(string(list.Raw), "ada@example.com") {
		t.Fatalf("customers listing while categories are parked: %s", list.Raw)
	}
	r := h.do(req{method: "GET", path: "/v1/escrow/category/get", key: h.sa()})
	if r.Status != 503 || !strings.Contains(r.Message, "categories") {
		t.Fatalf("categories listing while parked: %d %s, want 503 naming the read model", r.Status, r.Raw)
	}
	ready := h.do(req{path: "/readyz"})
	ready.expect(t, 200, "Ready")
	if !strings.Contains(string(ready.Raw), `"parked":["categories"]`) {
		t.Fatalf("readyz does not list the parked read model: %s", ready.Raw)
	}

	fixed.Store(true)
	if _, err := projections.Retry(context.Background(), h.pool, projections.CategoriesName); err != nil {
		t.Fatal(err)
	}
	for {
		r := h.do(req{method: "GET", path: "/v1/escrow/category/get", key: h.sa()})
		if r.Status == 200 {
			if !strings.Contains(string(r.Raw), `"Food"`) {
				t.Fatalf("the retried category is not in the read model: %s", r.Raw)
			}
			break
		}
		if r.Status != 503 || time.Now().After(deadline) {
			t.Fatalf("categories listing after the skip: %d %s", r.Status, r.Raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
