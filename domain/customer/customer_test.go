package customer

import (
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
)

var now = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func TestCreate(t *testing.T) {
	valid := NewCustomer{Firstname: "Ada", Lastname: "Obi", Email: "Ada@Example.com", Phone: "2348031234567"}
	with := func(f func(*NewCustomer)) NewCustomer { c := valid; f(&c); return c }
	tests := []struct {
		name    string
		in      NewCustomer
		wantErr string
		check   func(t *testing.T, c Created)
	}{
		{name: "valid, inherits merchant country, local phone, lower-case email", in: valid, check: func(t *testing.T, c Created) {
			if c.Phone != "08031234567" || c.Email != "ada@example.com" || c.CountryID != "cty_ng" {
				t.Fatalf("got %+v", c)
			}
		}},
		{name: "country by ISO code", in: with(func(c *NewCustomer) { c.CountryID = "gh"; c.Phone = "233241234567" }), check: func(t *testing.T, c Created) {
			if c.CountryID != "cty_gh" || c.Phone != "0241234567" {
				t.Fatalf("got %+v", c)
			}
		}},
		{name: "unknown country", in: with(func(c *NewCustomer) { c.CountryID = "zz" }), wantErr: "Invalid country selected"},
		{name: "missing firstname", in: with(func(c *NewCustomer) { c.Firstname = " " }), wantErr: "firstname is required"},
		{name: "missing lastname", in: with(func(c *NewCustomer) { c.Lastname = "" }), wantErr: "lastname is required"},
		{name: "missing email", in: with(func(c *NewCustomer) { c.Email = "" }), wantErr: "email is required"},
		{name: "bad email", in: with(func(c *NewCustomer) { c.Email = "ada@" }), wantErr: "email must be a valid email address"},
		{name: "plus phone", in: with(func(c *NewCustomer) { c.Phone = "+2348031234567" }), wantErr: "Invalid phone number"},
		{name: "missing phone", in: with(func(c *NewCustomer) { c.Phone = "" }), wantErr: "phone is required"},
		{name: "short bvn", in: with(func(c *NewCustomer) { c.BVN = "123" }), wantErr: "bvn must be 11 digits"},
		{name: "future dob", in: with(func(c *NewCustomer) { c.DOB = "2030-01-01" }), wantErr: "dob must be a past date in the form YYYY-MM-DD"},
		{name: "bvn and dob kept", in: with(func(c *NewCustomer) { c.BVN = "12345678901"; c.DOB = "1990-05-01" }), check: func(t *testing.T, c Created) {
			if c.BVN != "12345678901" || c.DOB != "1990-05-01" {
				t.Fatalf("got %+v", c)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Create("c1", "m1", domain.Test, "NG", tt.in, now)
			if tt.wantErr != "" {
				if err == nil || domain.ErrorMessage(err) != tt.wantErr || domain.ErrorCode(err) != domain.Invalid {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestApplyAndUpdate(t *testing.T) {
	created, err := Create("c1", "m1", domain.Test, "NG", NewCustomer{Firstname: "Ada", Lastname: "Obi", Email: "a@b.co", Phone: "08031234567"}, now)
	if err != nil {
		t.Fatal(err)
	}
	s := Apply(State{}, created)
	if !s.Exists() || !s.Permissions.CanBuy || !s.Permissions.CanSell || !s.Permissions.CanWithdraw {
		t.Fatalf("state %+v", s)
	}
	if _, _, err := UpdateProfile(s, Update{}, now); domain.ErrorMessage(err) != "Provide at least one of firstname, lastname or email" {
		t.Fatalf("empty update: %v", err)
	}
	same := "A@B.co"
	ev, newEmail, err := UpdateProfile(s, Update{Email: &same}, now)
	if err != nil || newEmail != "" || *ev.Email != "a@b.co" {
		t.Fatalf("same email (case) must not move the reservation: %v %q", err, newEmail)
	}
	other := "new@b.co"
	ev, newEmail, err = UpdateProfile(s, Update{Email: &other}, now)
	if err != nil || newEmail != "new@b.co" {
		t.Fatal(err, newEmail)
	}
	s = Apply(s, ev)
	if s.Email != "new@b.co" || s.Firstname != "Ada" {
		t.Fatalf("state %+v", s)
	}
	s = Apply(s, Blocked{Reason: "fraud"})
	if !s.Blocked || s.BlockedReason != "fraud" {
		t.Fatal("not blocked")
	}
	s = Apply(s, Unblocked{})
	if s.Blocked {
		t.Fatal("still blocked")
	}
}

func TestMaskBVN(t *testing.T) {
	for _, tc := range []struct{ bvn, want string }{
		{"12345678901", "*******8901"},
		{"", ""},
		// A forgotten customer's BVN reads as erased, not as a masked marker.
		{domain.Erased, domain.Erased},
	} {
		if got := MaskBVN(tc.bvn); got != tc.want {
			t.Errorf("MaskBVN(%q) = %q, want %q", tc.bvn, got, tc.want)
		}
	}
}

func TestReservation(t *testing.T) {
	r := ApplyReservation(Reservation{}, ReservationTaken{Holder: "c1"})
	if r.Holder != "c1" {
		t.Fatal(r)
	}
	if r = ApplyReservation(r, ReservationReleased{Holder: "c1"}); r.Holder != "" {
		t.Fatal(r)
	}
}

// TestErased: given a customer's events, the erasure leaves a state that
// holds nothing personal (each field that held a value reads
// domain.Erased, as a replay does once the key is destroyed; an empty one
// stays empty), keeps what is not personal, and refuses a profile update.
func TestErased(t *testing.T) {
	created := Created{CustomerID: "c1", MerchantID: "m1", Environment: domain.Test, Firstname: "Ada", Lastname: "Obi",
		Email: "a@b.co", Phone: "08031234567", CountryID: "cty_ng", BVN: "12345678901", CreatedAt: now}
	tests := []struct {
		name  string
		given []domain.Event
		want  State
	}{
		{name: "created, erased", given: []domain.Event{created, Erased{ErasedAt: now}}, want: State{ID: "c1", MerchantID: "m1",
			Environment: domain.Test, Firstname: domain.Erased, Lastname: domain.Erased, Email: domain.Erased, Phone: domain.Erased,
			CountryID: "cty_ng", BVN: domain.Erased, CreatedAt: now, Erased: true,
			Permissions: Permissions{CanBuy: true, CanSell: true, CanWithdraw: true}}},
		{name: "blocked with a reason, erased", given: []domain.Event{created, Blocked{Reason: "chargebacks", BlockedAt: now}, Erased{ErasedAt: now}},
			want: State{ID: "c1", MerchantID: "m1", Environment: domain.Test, Firstname: domain.Erased, Lastname: domain.Erased,
				Email: domain.Erased, Phone: domain.Erased, CountryID: "cty_ng", BVN: domain.Erased, CreatedAt: now, Erased: true,
				Blocked: true, BlockedReason: domain.Erased, Permissions: Permissions{CanBuy: true, CanSell: true, CanWithdraw: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s State
			for _, ev := range tt.given {
				s = Apply(s, ev)
			}
			if s != tt.want {
				t.Fatalf("state\n%+v\nwant\n%+v", s, tt.want)
			}
			name := "Grace"
			if _, _, err := UpdateProfile(s, Update{Firstname: &name}, now); domain.ErrorCode(err) != domain.Invalid ||
				domain.ErrorMessage(err) != "This customer's personal data was erased" {
				t.Fatalf("update of an erased customer: %v", err)
			}
		})
	}
}
