package escrow

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/money"
)

func autoRelease(c *Created) { c.Terms.AutoRelease = true }

func hoursWindow(n int) func(*Created) {
	return func(c *Created) { c.Terms.MaxDelivery, c.Terms.DeliveryTimeline = n, "hours" }
}

func expiring(at time.Time) func(*Created) { return func(c *Created) { c.ExpiresAt = at } }

// paid is the link of opts bought by b1 at paidAt, as Buy decides it: the
// payment fixes the release time from the terms it paid for.
func paid(t *testing.T, opts ...func(*Created)) []domain.Event {
	t.Helper()
	c := link(opts...)
	buy, err := Buy(fold(c), "b1", "p1", "", "", paidAt)
	if err != nil {
		t.Fatal(err)
	}
	return append([]domain.Event{c}, buy.Link...)
}

func TestBuyFixesTheReleaseTime(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []func(*Created)
		want time.Time
	}{
		{"auto-release, 7 days", []func(*Created){autoRelease}, paidAt.Add(7 * 24 * time.Hour)},
		{"auto-release, 3 hours", []func(*Created){autoRelease, hoursWindow(3)}, paidAt.Add(3 * time.Hour)},
		{"no auto-release", nil, time.Time{}},
		{"milestones never auto-release", []func(*Created){autoRelease, func(c *Created) { c.SettlementType = MilestoneSettlement }}, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs := paid(t, tc.opts...)
			f := evs[len(evs)-1].(Funded)
			if !f.ReleaseAt.Equal(tc.want) {
				t.Fatalf("ReleaseAt = %v, want %v", f.ReleaseAt, tc.want)
			}
			kind, at, ok := fold(evs...).NextDeadline()
			if tc.want.IsZero() {
				if ok {
					t.Fatalf("deadline %s at %v, want none", kind, at)
				}
				return
			}
			if !ok || kind != AutoReleaseDeadline || !at.Equal(tc.want) {
				t.Fatalf("deadline %q %v %v, want auto_release at %v", kind, at, ok, tc.want)
			}
		})
	}
}

// An edit while unpaid changes whether the payment starts an auto-release,
// and an edit of the window the time it fixes.
func TestEditAutoRelease(t *testing.T) {
	s := fold(link())
	ed, err := Edit(s, "s1", Patch{AutoRelease: ptr(true), MaxDelivery: ptr(2)}, t0)
	if err != nil {
		t.Fatal(err)
	}
	buy, err := Buy(Apply(s, ed), "b1", "p1", "", "", paidAt)
	if err != nil {
		t.Fatal(err)
	}
	if want := paidAt.Add(48 * time.Hour); !buy.Funded.ReleaseAt.Equal(want) {
		t.Fatalf("ReleaseAt = %v, want %v", buy.Funded.ReleaseAt, want)
	}
	ed, _ = Edit(Apply(s, ed), "s1", Patch{AutoRelease: ptr(false)}, t0)
	buy, _ = Buy(fold(link(), ed), "b1", "p1", "", "", paidAt)
	if !buy.Funded.ReleaseAt.IsZero() {
		t.Fatalf("auto-release turned off: ReleaseAt = %v", buy.Funded.ReleaseAt)
	}
}

func TestAutoRelease(t *testing.T) {
	window := 7 * 24 * time.Hour
	due := paidAt.Add(window)
	released := func(opts ...func(*Created)) []domain.Event {
		return func() []domain.Event {
			evs := paid(t, append([]func(*Created){autoRelease}, opts...)...)
			r, err := Confirm(fold(evs...), "b1", due)
			if err != nil {
				t.Fatal(err)
			}
			return append(evs, r)
		}()
	}
	tests := []struct {
		name    string
		given   []domain.Event
		at      time.Time
		wantErr error
		wantMsg string
	}{
		{name: "window elapsed: released as a confirmation", given: paid(t, autoRelease), at: due},
		{name: "long after the window: released", given: paid(t, autoRelease), at: due.Add(30 * 24 * time.Hour)},
		{name: "seller pays the fee, additional fee", given: paid(t, autoRelease, whoPays(Seller)), at: due},
		{name: "a second before the window elapses", given: paid(t, autoRelease), at: due.Add(-time.Second), wantErr: ErrNotDue},
		{name: "not auto-release", given: paid(t), at: due, wantErr: ErrActionNotAllowed},
		{name: "unpaid", given: []domain.Event{link(autoRelease)}, at: due, wantErr: ErrActionNotAllowed},
		{name: "disputed", given: append(paid(t, autoRelease), opened("b1")), at: due, wantMsg: "Escrow is under dispute"},
		{name: "investigating", given: append(paid(t, autoRelease), opened("b1"), answered("s1")), at: due, wantMsg: "Escrow is under dispute"},
		{name: "already confirmed", given: released(), at: due.Add(time.Minute), wantErr: ErrActionNotAllowed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := fold(tc.given...)
			got, err := AutoRelease(s, tc.at)
			if refused(t, err, tc.wantErr, tc.wantMsg) {
				return
			}
			// The same settlement, to the kobo, as the buyer's confirmation.
			want, err := Confirm(s, "b1", tc.at)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("auto-release\n%+v\nconfirmation\n%+v", got, want)
			}
			after := Apply(s, got)
			if after.Status != Completed {
				t.Fatalf("status %s, want COMPLETED", after.Status)
			}
			if _, _, ok := after.NextDeadline(); ok {
				t.Fatal("a completed escrow still has a deadline")
			}
			if _, err := AutoRelease(after, tc.at); err == nil {
				t.Fatal("released twice")
			}
		})
	}
}

func TestExpiresInHours(t *testing.T) {
	for _, tc := range []struct {
		hours   *int
		want    time.Time
		wantMsg string
	}{
		{nil, time.Time{}, ""},
		{ptr(1), t0.Add(time.Hour), ""},
		{ptr(720), t0.Add(720 * time.Hour), ""},
		{ptr(0), time.Time{}, "expiresInHours must be an integer between 1 and 720"},
		{ptr(721), time.Time{}, "expiresInHours must be an integer between 1 and 720"},
		{ptr(-3), time.Time{}, "expiresInHours must be an integer between 1 and 720"},
	} {
		d := Draft{Amount: money.Naira(10000), Purpose: "Phone", WhoPays: "buyer", ExpiresInHours: tc.hours}
		c, err := Create("e1", "PT_E1", "m1", domain.Test, "s1", fees, d, t0)
		if refused(t, err, nil, tc.wantMsg) {
			continue
		}
		if !c.ExpiresAt.Equal(tc.want) {
			t.Errorf("hours %v: ExpiresAt %v, want %v", tc.hours, c.ExpiresAt, tc.want)
		}
	}
}

func TestExpire(t *testing.T) {
	exp := t0.Add(24 * time.Hour)
	tests := []struct {
		name    string
		given   []domain.Event
		at      time.Time
		wantErr error
	}{
		{name: "unpaid at its expiry: deleted", given: []domain.Event{link(expiring(exp))}, at: exp},
		{name: "unpaid long after: deleted", given: []domain.Event{link(expiring(exp))}, at: exp.Add(90 * 24 * time.Hour)},
		{name: "multi-unit link, some units sold", given: []domain.Event{link(expiring(exp), multi(3)),
			UnitSold{CloneID: "e2", Remaining: 2, At: paidAt}}, at: exp},
		{name: "before its expiry", given: []domain.Event{link(expiring(exp))}, at: exp.Add(-time.Second), wantErr: ErrNotDue},
		{name: "no expiry", given: []domain.Event{link()}, at: exp, wantErr: ErrActionNotAllowed},
		{name: "paid before its expiry", given: paid(t, expiring(exp)), at: exp, wantErr: ErrActionNotAllowed},
		{name: "deleted by the seller", given: []domain.Event{link(expiring(exp)), Deleted{At: t0.Add(time.Hour)}}, at: exp,
			wantErr: ErrActionNotAllowed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := fold(tc.given...)
			got, err := Expire(s, tc.at)
			if refused(t, err, tc.wantErr, "") {
				return
			}
			if got != (Deleted{At: tc.at}) {
				t.Fatalf("got %+v", got)
			}
			if _, _, ok := Apply(s, got).NextDeadline(); ok {
				t.Fatal("a deleted escrow still has a deadline")
			}
		})
	}
}

// A clone funded from an expiring multi-unit link does not inherit the
// link's expiry (it is paid), and its release follows its own payment.
func TestCloneDeadlines(t *testing.T) {
	s := fold(link(expiring(t0.Add(time.Hour)), multi(2), autoRelease))
	buy, err := Buy(s, "b1", "p1", "e2", "PT_E2", paidAt)
	if err != nil {
		t.Fatal(err)
	}
	if !buy.Clone.ExpiresAt.IsZero() {
		t.Fatalf("clone expires at %v", buy.Clone.ExpiresAt)
	}
	kind, at, ok := buy.Funded.NextDeadline()
	if !ok || kind != AutoReleaseDeadline || !at.Equal(paidAt.Add(7*24*time.Hour)) {
		t.Fatalf("clone deadline %q %v %v", kind, at, ok)
	}
	if kind, _, _ := Apply(s, buy.Link[0]).NextDeadline(); kind != ExpiryDeadline {
		t.Fatalf("link deadline %q, want its expiry", kind)
	}
}

func TestExtendWindow(t *testing.T) {
	day := 24 * time.Hour
	ext := func(by int) WindowExtended { return WindowExtended{By: by, At: now} }
	tests := []struct {
		name          string
		given         []domain.Event
		buyer         string
		by            int
		wantReleaseAt time.Time // zero: no auto-release
		wantErr       error
		wantMsg       string
	}{
		{name: "auto-release moves", given: paid(t, autoRelease), buyer: "b1", by: 3, wantReleaseAt: paidAt.Add(10 * day)},
		{name: "without auto-release", given: paid(t), buyer: "b1", by: 7},
		{name: "second extension, up to the original window", given: append(paid(t, autoRelease),
			WindowExtended{By: 4, ReleaseAt: paidAt.Add(11 * day), At: now}), buyer: "b1", by: 3,
			wantReleaseAt: paidAt.Add(14 * day)},
		{name: "a third extension", given: append(paid(t), ext(1), ext(1)), buyer: "b1", by: 1, wantErr: ErrExtensionsUsed},
		{name: "more than the original window in total", given: append(paid(t), ext(5)), buyer: "b1", by: 3, wantErr: ErrExtensionTooLong},
		{name: "more than the original window at once", given: paid(t), buyer: "b1", by: 8, wantErr: ErrExtensionTooLong},
		{name: "zero", given: paid(t), buyer: "b1", by: 0, wantMsg: "by must be a positive integer"},
		{name: "not the buyer", given: paid(t), buyer: "s1", by: 1, wantErr: ErrActionNotAllowed},
		{name: "unpaid", given: []domain.Event{link()}, buyer: "b1", by: 1, wantErr: ErrActionNotAllowed},
		{name: "disputed", given: append(paid(t), opened("b1")), buyer: "b1", by: 1, wantMsg: "Escrow is under dispute"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := fold(tc.given...)
			got, err := ExtendWindow(s, tc.buyer, tc.by, now)
			if refused(t, err, tc.wantErr, tc.wantMsg) {
				return
			}
			if got.By != tc.by || !got.ReleaseAt.Equal(tc.wantReleaseAt) {
				t.Fatalf("got %+v, want by %d, release at %v", got, tc.by, tc.wantReleaseAt)
			}
			after := Apply(s, got)
			// The seller's claim waits for the new window too.
			if want := paidAt.Add(time.Duration(7+after.ExtendedBy) * day); !after.ClaimableAt().Equal(want) {
				t.Fatalf("claimable at %v, want %v", after.ClaimableAt(), want)
			}
			if _, err := Claim(after, "s1", after.ClaimableAt().Add(-time.Second)); err == nil {
				t.Fatal("claimed within the extended window")
			}
			if !tc.wantReleaseAt.IsZero() {
				if _, err := AutoRelease(after, tc.wantReleaseAt.Add(-time.Second)); !errors.Is(err, ErrNotDue) {
					t.Fatalf("auto-release within the extended window: %v", err)
				}
				if _, err := AutoRelease(after, tc.wantReleaseAt); err != nil {
					t.Fatalf("auto-release at the extended window: %v", err)
				}
			}
		})
	}
}

func TestRemindWindowEnding(t *testing.T) {
	day := 24 * time.Hour
	reminded := Reminded{Reminder: WindowEndingDeadline, At: paidAt.Add(6 * day)}
	tests := []struct {
		name     string
		given    []domain.Event
		remindAt time.Time // what the payment fixed
		at       time.Time
		wantErr  error
		wantMsg  string
	}{
		{name: "7 days: a day before", given: paid(t), remindAt: paidAt.Add(6 * day), at: paidAt.Add(6 * day)},
		{name: "2 days: a day before", given: paid(t, func(c *Created) { c.Terms.MaxDelivery = 2 }), remindAt: paidAt.Add(day),
			at: paidAt.Add(day)},
		{name: "30 hours: a day before", given: paid(t, hoursWindow(30)), remindAt: paidAt.Add(6 * time.Hour), at: paidAt.Add(6 * time.Hour)},
		{name: "a day: at once", given: paid(t, hoursWindow(24)), remindAt: paidAt, at: paidAt},
		{name: "3 hours: half-way", given: paid(t, hoursWindow(3)), remindAt: paidAt.Add(90 * time.Minute), at: paidAt.Add(2 * time.Hour)},
		{name: "before it is due", given: paid(t), remindAt: paidAt.Add(6 * day), at: paidAt.Add(6*day - time.Second), wantErr: ErrNotDue},
		{name: "sent already", given: append(paid(t), reminded), remindAt: paidAt.Add(6 * day), at: paidAt.Add(6 * day),
			wantErr: ErrActionNotAllowed},
		{name: "disputed", given: append(paid(t), opened("b1")), remindAt: paidAt.Add(6 * day), at: paidAt.Add(6 * day),
			wantErr: ErrActionNotAllowed},
		{name: "unpaid", given: []domain.Event{link()}, at: paidAt.Add(6 * day), wantErr: ErrActionNotAllowed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := fold(tc.given...)
			if !s.RemindAt.Equal(tc.remindAt) {
				t.Fatalf("RemindAt = %v, want %v", s.RemindAt, tc.remindAt)
			}
			got, err := RemindWindowEnding(s, tc.at)
			if refused(t, err, tc.wantErr, tc.wantMsg) {
				return
			}
			if got != (Reminded{Reminder: WindowEndingDeadline, At: tc.at}) {
				t.Fatalf("got %+v", got)
			}
			if _, err := RemindWindowEnding(Apply(s, got), tc.at); err == nil {
				t.Fatal("reminded twice")
			}
		})
	}
	// An extension before the reminder moves it; after, it is not sent again.
	s := fold(paid(t)...)
	ext, err := ExtendWindow(s, "b1", 2, paidAt.Add(day))
	if err != nil || !ext.RemindAt.Equal(paidAt.Add(8*day)) {
		t.Fatalf("extension before the reminder: %+v %v, want remind at %v", ext, err, paidAt.Add(8*day))
	}
	s = fold(append(paid(t), reminded)...)
	if ext, _ = ExtendWindow(s, "b1", 2, paidAt.Add(6*day)); !ext.RemindAt.IsZero() || !Apply(s, ext).Reminded {
		t.Fatalf("extension after the reminder: %+v", ext)
	}
}

// Awaits tells a deadline the escrow has moved past (its refusal is final)
// from one it still awaits (a refusal is a fault, retried).
func TestAwaits(t *testing.T) {
	exp := t0.Add(time.Hour)
	remind := Reminded{Reminder: WindowEndingDeadline, At: now}
	for _, tc := range []struct {
		name  string
		given []domain.Event
		want  map[DeadlineKind]bool
	}{
		{"unpaid, expiring", []domain.Event{link(expiring(exp))}, map[DeadlineKind]bool{ExpiryDeadline: true}},
		{"unpaid, no expiry", []domain.Event{link()}, map[DeadlineKind]bool{}},
		{"deleted", []domain.Event{link(expiring(exp)), Deleted{At: now}}, map[DeadlineKind]bool{}},
		{"paid, auto-release", paid(t, autoRelease, expiring(exp)),
			map[DeadlineKind]bool{AutoReleaseDeadline: true, WindowEndingDeadline: true}},
		{"paid, reminded", append(paid(t), remind), map[DeadlineKind]bool{}},
		{"disputed", append(paid(t, autoRelease), opened("b1")), map[DeadlineKind]bool{}},
		{"paid milestones, one due", dueMilestones(t, after(time.Hour), nil), map[DeadlineKind]bool{MilestoneDueDeadline: true}},
		{"paid milestones, none due", dueMilestones(t, nil, nil), map[DeadlineKind]bool{}},
		{"disputed milestones", append(dueMilestones(t, after(time.Hour), nil), opened("b1")), map[DeadlineKind]bool{}},
	} {
		s := fold(tc.given...)
		for _, k := range []DeadlineKind{AutoReleaseDeadline, ExpiryDeadline, WindowEndingDeadline, MilestoneDueDeadline} {
			if got := s.Awaits(k); got != tc.want[k] {
				t.Errorf("%s: Awaits(%s) = %v, want %v", tc.name, k, got, tc.want[k])
			}
		}
	}
}
