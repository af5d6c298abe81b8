package category

import (
	"reflect"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/domaintest"
)

func TestPlace(t *testing.T) {
	o := Order{IDs: []string{"a", "b", "c"}}
	for _, tc := range []struct {
		pos  int
		want []string
		err  string
	}{
		{0, []string{"n", "a", "b", "c"}, ""}, // the default: the top
		{1, []string{"n", "a", "b", "c"}, ""},
		{2, []string{"a", "n", "b", "c"}, ""},
		{4, []string{"a", "b", "c", "n"}, ""},
		{5, nil, "category_position must be an integer between 1 and 4"},
		{-1, nil, "category_position must be an integer between 1 and 4"},
	} {
		ev, err := Place(o, "m", domain.Test, "n", tc.pos, "category_position")
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("place at %d: err %v, want %q", tc.pos, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(ev, OrderSet{MerchantID: "m", Environment: domain.Test, IDs: tc.want}) {
			t.Errorf("place at %d: %+v %v, want %v", tc.pos, ev, err, tc.want)
		}
	}
	if !reflect.DeepEqual(o.IDs, []string{"a", "b", "c"}) {
		t.Fatalf("Place changed its input: %v", o.IDs)
	}
	// The order lists every category in one event: past MaxCategories a new
	// one is refused.
	full := Order{IDs: make([]string, MaxCategories)}
	if _, err := Place(full, "m", domain.Test, "n", 0, "category_position"); err == nil ||
		err.Error() != "A merchant may have at most 500 categories" {
		t.Fatalf("place past the cap: %v", err)
	}
	if _, err := Place(Order{IDs: make([]string, MaxCategories-1)}, "m", domain.Test, "n", 0, "category_position"); err != nil {
		t.Fatalf("place the last one: %v", err)
	}
}

func TestMove(t *testing.T) {
	o := Order{IDs: []string{"a", "b", "c", "d"}}
	for _, tc := range []struct {
		id      string
		pos     int
		want    []string
		changed bool
		err     string
	}{
		{"c", 1, []string{"c", "a", "b", "d"}, true, ""},
		{"a", 4, []string{"b", "c", "d", "a"}, true, ""},
		{"b", 3, []string{"a", "c", "b", "d"}, true, ""},
		{"b", 2, nil, false, ""},
		{"a", 5, nil, false, "newPosition must be an integer between 1 and 4"},
		{"a", 0, nil, false, "newPosition must be an integer between 1 and 4"},
		// Created before the order existed: placed where asked.
		{"old", 2, []string{"a", "old", "b", "c", "d"}, true, ""},
		{"old", 5, []string{"a", "b", "c", "d", "old"}, true, ""},
		{"old", 6, nil, false, "newPosition must be an integer between 1 and 5"},
	} {
		ev, changed, err := Move(o, "m", domain.Test, tc.id, tc.pos)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("move %s to %d: err %v, want %q", tc.id, tc.pos, err, tc.err)
			}
			continue
		}
		if err != nil || changed != tc.changed || (changed && !reflect.DeepEqual(ev.IDs, tc.want)) {
			t.Errorf("move %s to %d: %v %v %v, want %v %v", tc.id, tc.pos, ev.IDs, changed, err, tc.want, tc.changed)
		}
	}
}

func TestRemoveAndFold(t *testing.T) {
	o := Order{IDs: []string{"a", "b", "c"}}
	ev, changed := Remove(o, "m", domain.Live, "b")
	if !changed || !reflect.DeepEqual(ev.IDs, []string{"a", "c"}) {
		t.Fatalf("remove b: %v %v", ev.IDs, changed)
	}
	if _, changed := Remove(o, "m", domain.Live, "x"); changed {
		t.Fatal("removing an id not in the order changed it")
	}
	got := ApplyOrder(o, ev)
	if got.Position("c") != 2 || got.Position("b") != 0 || got.Position("a") != 1 {
		t.Fatalf("positions after the fold: %v", got.IDs)
	}
	decoded := domaintest.RoundTrip(t, OrderRegistry, ev)
	if !reflect.DeepEqual(ApplyOrder(Order{}, decoded[0]), got) {
		t.Fatalf("decoded order folds to %v", ApplyOrder(Order{}, decoded[0]))
	}
}
