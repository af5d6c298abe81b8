package projections

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/view"
)

// The customers projector plans a batch as one insert per run of
// creations and one update per other event, in the batch's order. Applied
// one event at a time, in batches of two and three, and all at once, and
// then once more over itself, it writes the same rows: each change after
// the creation it follows, every customer numbered in its tenant in the
// order of the log, and counted once.
func TestCustomersAppliedInAnyBatches(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	svc, test := e.service(t)
	live := test
	live.Environment = domain.Live
	names := []string{"Ada", "Bola", "Chidi", "Dayo", "Emeka", "Funke"}
	var ids []string
	var head eventstore.Position
	create := func(a app.Actor) {
		t.Helper()
		i := len(ids)
		id, pos, err := svc.CreateCustomer(ctx, a, customer.NewCustomer{Firstname: names[i], Lastname: "Obi",
			Email: fmt.Sprintf("c%d@x.co", i), Phone: fmt.Sprintf("0803777100%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids, head = append(ids, id), pos
	}
	rename := func(a app.Actor, i int) {
		t.Helper()
		name := "Renamed" + names[i]
		pos, err := svc.UpdateCustomer(ctx, a, ids[i], customer.Update{Firstname: &name})
		if err != nil {
			t.Fatal(err)
		}
		head = pos
	}
	no := false
	create(test) // 0: test 1
	create(live) // 1: live 1
	rename(test, 0)
	create(test) // 2: test 2
	pos, err := svc.SetPermissions(ctx, live, ids[1], nil, &no, nil)
	if err != nil {
		t.Fatal(err)
	}
	head = pos
	create(test) // 3: test 3
	mid := head
	create(test) // 4: test 4, in a run of creations with 3
	rename(test, 2)
	rename(test, 3)
	create(live) // 5: live 2

	q := NewQueries(e.pool, nil)
	state := func() (rows []Customer, positions map[string]int64, counts map[string]int64) {
		t.Helper()
		for _, env := range []domain.Environment{domain.Test, domain.Live} {
			got, pg, err := q.ListCustomers(ctx, test.MerchantID, env, view.Page{Page: 1, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			if int(pg.Count) != len(got) {
				t.Fatalf("%s: count %d for %d customers", env, pg.Count, len(got))
			}
			rows = append(rows, got...)
		}
		positions, counts = map[string]int64{}, map[string]int64{}
		for i, id := range ids {
			positions[fmt.Sprint(i)] = count(t, e.pool, `SELECT pos FROM rm_customers WHERE customer_id = $1`, id)
		}
		for _, env := range []string{"test", "live"} {
			counts[env] = count(t, e.pool, `SELECT coalesce(sum(n), 0) FROM rm_customer_counts WHERE merchant_id = $1 AND environment = $2`,
				test.MerchantID, env)
		}
		return rows, positions, counts
	}
	wantPositions := map[string]int64{"0": 1, "1": 1, "2": 2, "3": 3, "4": 4, "5": 2}
	wantCounts := map[string]int64{"test": 4, "live": 2}
	if _, err := prepare(ctx, e.pool, Customers{}); err != nil {
		t.Fatal(err)
	}
	var want []Customer
	for _, batch := range []int{1, 2, 3, 1000} {
		if _, err := e.pool.Exec(ctx, `TRUNCATE rm_customers, rm_customer_counts;
			UPDATE projection_checkpoints SET commit_pos = 0, prepare_pos = 0 WHERE name = 'customers'`); err != nil {
			t.Fatal(err)
		}
		if _, err := applyUpTo(ctx, e.store, e.pool, Customers{}, visible(t, e.store, head), batch, nil); err != nil {
			t.Fatal(err)
		}
		rows, positions, counts := state()
		if !reflect.DeepEqual(positions, wantPositions) || !reflect.DeepEqual(counts, wantCounts) {
			t.Fatalf("batches of %d: positions %v, counts %v; want %v, %v", batch, positions, counts, wantPositions, wantCounts)
		}
		if want == nil {
			want = rows
			byID := map[string]Customer{}
			for _, c := range rows {
				byID[c.CustomerID] = c
			}
			if c := byID[ids[0]]; c.Firstname != "RenamedAda" || !c.UpdatedAt.After(c.CreatedAt) {
				t.Fatalf("customer 0 %+v", c)
			}
			if c := byID[ids[1]]; c.Permissions.CanSell || !c.Permissions.CanBuy || c.Environment != "live" {
				t.Fatalf("customer 1 %+v", c)
			}
			if c := byID[ids[5]]; c.Firstname != "Funke" || c.UpdatedAt != c.CreatedAt {
				t.Fatalf("customer 4 %+v", c)
			}
		} else if !reflect.DeepEqual(rows, want) {
			t.Fatalf("batches of %d: %+v\nwant %+v", batch, rows, want)
		}
		reapplyAll(t, e, Customers{})
		rows, positions, counts = state()
		if !reflect.DeepEqual(rows, want) || !reflect.DeepEqual(positions, wantPositions) || !reflect.DeepEqual(counts, wantCounts) {
			t.Fatalf("batches of %d, applied again: %+v %v %v", batch, rows, positions, counts)
		}
	}

	// Part of the log applied, then the whole log over it: the run of
	// creations 3 and 4 meets 3 again, and 4 is numbered on from it,
	// without a gap.
	if _, err := e.pool.Exec(ctx, `TRUNCATE rm_customers, rm_customer_counts;
		UPDATE projection_checkpoints SET commit_pos = 0, prepare_pos = 0 WHERE name = 'customers'`); err != nil {
		t.Fatal(err)
	}
	if _, err := applyUpTo(ctx, e.store, e.pool, Customers{}, mid, 1, nil); err != nil {
		t.Fatal(err)
	}
	reapplyAll(t, e, Customers{})
	if rows, positions, counts := state(); !reflect.DeepEqual(rows, want) || !reflect.DeepEqual(positions, wantPositions) ||
		!reflect.DeepEqual(counts, wantCounts) {
		t.Fatalf("half, then all: %+v %v %v", rows, positions, counts)
	}
}
