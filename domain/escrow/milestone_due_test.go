package escrow

import (
	"reflect"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/money"
)

// dueMilestones is a milestone escrow paid at paidAt whose milestones are
// due at the offsets given after payment (nil: no dueDate), bought as Buy
// decides it.
func dueMilestones(t *testing.T, dues ...*time.Duration) []domain.Event {
	t.Helper()
	ds := make([]MilestoneDraft, len(dues))
	for i, d := range dues {
		ds[i] = MilestoneDraft{ID: "m" + string(rune('1'+i)), Title: "t", Amount: money.Naira(1000)}
		if d != nil {
			at := paidAt.Add(*d)
			ds[i].DueDate = &at
		}
	}
	draft := Draft{Amount: money.Naira(1000 * int64(len(dues))), Purpose: "Site", WhoPays: "buyer"}
	c, err := CreateMilestones("e1", "PT_E1", "m1", domain.Test, "s1", fees, draft, ds, t0)
	if err != nil {
		t.Fatal(err)
	}
	buy, err := Buy(fold(c), "b1", "p1", "", "", paidAt)
	if err != nil {
		t.Fatal(err)
	}
	return append([]domain.Event{c}, buy.Link...)
}

func after(d time.Duration) *time.Duration { return &d }

func TestRemindMilestoneDue(t *testing.T) {
	h := time.Hour
	tests := []struct {
		name     string
		given    []domain.Event
		dueAt    time.Time // what the events fixed
		at       time.Time
		want     *Reminded
		wantErr  error
		wantNext time.Time
	}{
		{name: "the earliest due, not the first in order", given: dueMilestones(t, after(3*h), nil, after(2*h)),
			dueAt: paidAt.Add(2 * h), at: paidAt.Add(2 * h),
			want: &Reminded{Reminder: MilestoneDueDeadline, MilestoneID: "m3", NextDueAt: paidAt.Add(3 * h), At: paidAt.Add(2 * h)}},
		{name: "the last one due: nothing next", given: dueMilestones(t, after(h), nil),
			dueAt: paidAt.Add(h), at: paidAt.Add(5 * h),
			want: &Reminded{Reminder: MilestoneDueDeadline, MilestoneID: "m1", At: paidAt.Add(5 * h)}},
		{name: "two due at once: one after the other, in order", given: dueMilestones(t, nil, after(h), after(h)),
			dueAt: paidAt.Add(h), at: paidAt.Add(h),
			want: &Reminded{Reminder: MilestoneDueDeadline, MilestoneID: "m2", NextDueAt: paidAt.Add(h), At: paidAt.Add(h)}},
		{name: "before it is due", given: dueMilestones(t, after(h), nil), dueAt: paidAt.Add(h), at: paidAt.Add(h - time.Second),
			wantErr: ErrNotDue},
		{name: "no due dates", given: dueMilestones(t, nil, nil), at: paidAt.Add(h), wantErr: ErrActionNotAllowed},
		{name: "every due one reminded", at: paidAt.Add(2 * h), wantErr: ErrActionNotAllowed,
			given: append(dueMilestones(t, after(h), nil), Reminded{Reminder: MilestoneDueDeadline, MilestoneID: "m1", At: paidAt.Add(h)})},
		{name: "disputed", given: append(dueMilestones(t, after(h), nil), opened("b1")), dueAt: paidAt.Add(h), at: paidAt.Add(h),
			wantErr: ErrActionNotAllowed},
		{name: "a standard escrow", given: paid(t), at: now, wantErr: ErrActionNotAllowed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := fold(tc.given...)
			if !s.MilestoneDueAt.Equal(tc.dueAt) {
				t.Fatalf("MilestoneDueAt = %v, want %v", s.MilestoneDueAt, tc.dueAt)
			}
			got, err := RemindMilestoneDue(s, tc.at)
			if refused(t, err, tc.wantErr, "") {
				if s.Awaits(MilestoneDueDeadline) && !tc.dueAt.IsZero() && tc.wantErr != ErrNotDue {
					t.Fatalf("refused, yet the escrow awaits a milestone-due reminder")
				}
				return
			}
			if !reflect.DeepEqual(got, *tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, *tc.want)
			}
			s = Apply(s, got)
			if !s.MilestoneDueAt.Equal(got.NextDueAt) || s.Awaits(MilestoneDueDeadline) != !got.NextDueAt.IsZero() {
				t.Fatalf("after the reminder: due %v, awaits %v", s.MilestoneDueAt, s.Awaits(MilestoneDueDeadline))
			}
			// A milestone is reminded of once.
			if again, err := RemindMilestoneDue(s, tc.at); err == nil && again.MilestoneID == got.MilestoneID {
				t.Fatalf("reminded of %s twice", got.MilestoneID)
			}
		})
	}
}

// Releasing the milestone that is next due moves the reminder to the one
// after it; releasing the last completes the escrow and leaves none.
func TestMilestoneReleaseMovesTheReminder(t *testing.T) {
	s := fold(dueMilestones(t, after(time.Hour), after(2*time.Hour), nil)...)
	rel, err := ReleaseMilestone(s, "b1", "m1", paidAt.Add(time.Minute))
	if err != nil || !rel.MilestoneDueAt.Equal(paidAt.Add(2*time.Hour)) {
		t.Fatalf("release of m1: %+v %v, want the next reminder at m2's dueDate", rel.MilestoneDueAt, err)
	}
	s = Apply(s, rel)
	if rel, err = ReleaseMilestone(s, "b1", "m2", paidAt.Add(2*time.Minute)); err != nil || !rel.MilestoneDueAt.IsZero() {
		t.Fatalf("release of m2: %+v %v, want no reminder left", rel.MilestoneDueAt, err)
	}
	s = Apply(s, rel)
	if s.Awaits(MilestoneDueDeadline) {
		t.Fatal("awaits a reminder with no due milestone pending")
	}
	rel, err = ReleaseMilestone(s, "b1", "m3", paidAt.Add(3*time.Minute))
	if err != nil || rel.Status != Completed || !rel.MilestoneDueAt.IsZero() {
		t.Fatalf("last release: %+v %v", rel, err)
	}
}
