package category

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/domaintest"
)

var now = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func created(name, desc string) Created {
	return Created{CategoryID: "c1", MerchantID: "m1", Environment: domain.Test, Name: name, Description: desc,
		CreatedAt: now.Add(-time.Hour)}
}

func fold(events ...domain.Event) State {
	var s State
	for _, e := range events {
		s = Apply(s, e)
	}
	return s
}

func ptr(s string) *string { return &s }

func TestCreate(t *testing.T) {
	tests := []struct {
		name    string
		in      New
		want    Created
		wantErr string
	}{
		{name: "trimmed", in: New{Name: "  Electronics ", Description: " Phones and laptops "},
			want: Created{CategoryID: "new", MerchantID: "m1", Environment: domain.Test, Name: "Electronics",
				Description: "Phones and laptops", CreatedAt: now}},
		{name: "description optional", in: New{Name: "Food"},
			want: Created{CategoryID: "new", MerchantID: "m1", Environment: domain.Test, Name: "Food", CreatedAt: now}},
		{name: "name of exactly 100 multi-byte characters", in: New{Name: strings.Repeat("é", 100)},
			want: Created{CategoryID: "new", MerchantID: "m1", Environment: domain.Test, Name: strings.Repeat("é", 100), CreatedAt: now}},
		{name: "description of exactly 500 characters", in: New{Name: "x", Description: strings.Repeat("ü", 500)},
			want: Created{CategoryID: "new", MerchantID: "m1", Environment: domain.Test, Name: "x",
				Description: strings.Repeat("ü", 500), CreatedAt: now}},
		{name: "missing name", in: New{Description: "d"}, wantErr: "name is required"},
		{name: "blank name", in: New{Name: " \t "}, wantErr: "name is required"},
		{name: "name too long", in: New{Name: strings.Repeat("x", 101)}, wantErr: "name must be at most 100 characters"},
		{name: "description too long", in: New{Name: "x", Description: strings.Repeat("x", 501)},
			wantErr: "description must be at most 500 characters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Create("new", "m1", domain.Test, tt.in, now)
			if tt.wantErr != "" {
				if err == nil || domain.ErrorMessage(err) != tt.wantErr || domain.ErrorCode(err) != domain.Invalid {
					t.Fatalf("err = %v, want 400 %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestUpdate(t *testing.T) {
	base := []domain.Event{created("Food", "Groceries")}
	tests := []struct {
		name        string
		given       []domain.Event
		in          Edit
		want        Updated
		wantChanged bool
		wantErr     string
		wantCode    domain.Code
	}{
		{name: "rename", given: base, in: Edit{Name: ptr(" Drinks ")},
			want: Updated{Name: ptr("Drinks"), UpdatedAt: now}, wantChanged: true},
		{name: "change of case only", given: base, in: Edit{Name: ptr("FOOD")},
			want: Updated{Name: ptr("FOOD"), UpdatedAt: now}, wantChanged: true},
		{name: "description only", given: base, in: Edit{Description: ptr("Fresh produce")},
			want: Updated{Description: ptr("Fresh produce"), UpdatedAt: now}, wantChanged: true},
		{name: "description cleared", given: base, in: Edit{Description: ptr("")},
			want: Updated{Description: ptr(""), UpdatedAt: now}, wantChanged: true},
		{name: "only what differs is set", given: base, in: Edit{Name: ptr("Food"), Description: ptr("Meals")},
			want: Updated{Description: ptr("Meals"), UpdatedAt: now}, wantChanged: true},
		{name: "same values change nothing", given: base, in: Edit{Name: ptr(" Food"), Description: ptr("Groceries ")},
			want: Updated{UpdatedAt: now}},
		{name: "after an update", given: append(base, Updated{Name: ptr("Drinks")}), in: Edit{Name: ptr("Food")},
			want: Updated{Name: ptr("Food"), UpdatedAt: now}, wantChanged: true},
		{name: "nothing sent", given: base, in: Edit{}, wantErr: "Provide name or description", wantCode: domain.Invalid},
		{name: "blank name", given: base, in: Edit{Name: ptr("  ")}, wantErr: "name is required", wantCode: domain.Invalid},
		{name: "name too long", given: base, in: Edit{Name: ptr(strings.Repeat("x", 101))},
			wantErr: "name must be at most 100 characters", wantCode: domain.Invalid},
		{name: "description too long", given: base, in: Edit{Description: ptr(strings.Repeat("x", 501))},
			wantErr: "description must be at most 500 characters", wantCode: domain.Invalid},
		{name: "unknown", in: Edit{Name: ptr("x")}, wantErr: "Category not found", wantCode: domain.NotFound},
		{name: "deleted", given: append(base, Deleted{DeletedAt: now}), in: Edit{Name: ptr("x")},
			wantErr: "Category not found", wantCode: domain.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, changed, err := Update(fold(tt.given...), tt.in, now)
			if tt.wantErr != "" {
				if err == nil || domain.ErrorMessage(err) != tt.wantErr || domain.ErrorCode(err) != tt.wantCode {
					t.Fatalf("err = %v, want %s %q", err, tt.wantCode, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if changed != tt.wantChanged || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v (changed %v)\nwant %+v (changed %v)", got, changed, tt.want, tt.wantChanged)
			}
		})
	}
}

func TestDelete(t *testing.T) {
	tests := []struct {
		name    string
		given   []domain.Event
		want    Deleted
		wantErr bool
	}{
		{name: "existing", given: []domain.Event{created("Food", "")}, want: Deleted{DeletedAt: now}},
		{name: "renamed", given: []domain.Event{created("Food", ""), Updated{Name: ptr("Drinks")}}, want: Deleted{DeletedAt: now}},
		{name: "unknown", wantErr: true},
		{name: "already deleted", given: []domain.Event{created("Food", ""), Deleted{DeletedAt: now}}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Delete(fold(tt.given...), now)
			if tt.wantErr {
				if domain.ErrorCode(err) != domain.NotFound || domain.ErrorMessage(err) != "Category not found" {
					t.Fatalf("err = %v, want 404 Category not found", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestApply(t *testing.T) {
	later := now.Add(time.Minute)
	s := fold(created("Food", "Groceries"))
	want := State{ID: "c1", MerchantID: "m1", Environment: domain.Test, Name: "Food", Description: "Groceries",
		CreatedAt: now.Add(-time.Hour), UpdatedAt: now.Add(-time.Hour)}
	if !reflect.DeepEqual(s, want) || !s.Exists() {
		t.Fatalf("created %+v", s)
	}
	s = Apply(s, Updated{Name: ptr("Drinks"), UpdatedAt: now})
	if s.Name != "Drinks" || s.Description != "Groceries" || s.UpdatedAt != now {
		t.Fatalf("renamed %+v", s)
	}
	s = Apply(s, Updated{Description: ptr(""), UpdatedAt: later})
	if s.Name != "Drinks" || s.Description != "" || s.UpdatedAt != later {
		t.Fatalf("description cleared %+v", s)
	}
	s = Apply(s, Deleted{DeletedAt: later})
	if s.Exists() || !s.Deleted || s.ID != "c1" {
		t.Fatalf("deleted %+v", s)
	}
	if (State{}).Exists() {
		t.Fatal("zero state exists")
	}
}

func TestNameKeyIgnoresCaseAndSpace(t *testing.T) {
	k := NameKey("m1", domain.Test, "Food")
	if k != "m1:test:category:food" {
		t.Fatalf("key %q", k)
	}
	for _, n := range []string{"FOOD", " food ", "fOoD"} {
		if NameKey("m1", domain.Test, n) != k {
			t.Errorf("NameKey(%q) differs", n)
		}
	}
	if NameKey("m1", domain.Live, "Food") == k || NameKey("m2", domain.Test, "Food") == k {
		t.Error("tenants share a key")
	}
	if fold(created("Food", "")).NameKey() != k {
		t.Error("State.NameKey")
	}
}

func TestEventsRoundTrip(t *testing.T) {
	domaintest.RoundTrip(t, Registry, created("Food", "Groceries"), Updated{Name: ptr("Drinks"), UpdatedAt: now},
		Updated{Description: ptr(""), UpdatedAt: now}, Deleted{DeletedAt: now})
}
