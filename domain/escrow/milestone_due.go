package escrow

import (
	"slices"
	"time"
)

// MilestoneDueDeadline reminds buyer and seller (the webhook
// escrow.milestone_due) that a pending milestone of an ONGOING milestone
// escrow has reached its dueDate, once per milestone.
const MilestoneDueDeadline DeadlineKind = "milestone_due"

// An escrow keeps one milestone-due deadline at a time: the earliest
// dueDate among its pending milestones not reminded of yet. The payment
// starts it, and each event that changes which milestone comes next (a
// reminder sent, a milestone released) carries the next one's time, so
// the deadlines read model follows the events alone.

// nextMilestoneDue is when the next milestone-due reminder is due (zero
// when no pending milestone with a dueDate awaits one).
func (s State) nextMilestoneDue() time.Time {
	if m, ok := s.nextDueMilestone(); ok {
		return *m.DueDate
	}
	return time.Time{}
}

// nextDueMilestone is the pending milestone with the earliest dueDate not
// reminded of yet (the first in the escrow's order among equal dates).
func (s State) nextDueMilestone() (Milestone, bool) {
	var next Milestone
	found := false
	for _, m := range s.Milestones {
		if m.Status != MilestonePending || m.DueDate == nil || slices.Contains(s.MilestonesReminded, m.ID) {
			continue
		}
		if !found || m.DueDate.Before(*next.DueDate) {
			next, found = m, true
		}
	}
	return next, found
}

// RemindMilestoneDue decides the reminder of the next pending milestone
// whose dueDate has passed, of an ONGOING milestone escrow, once per
// milestone. The event names the milestone and when the next reminder is
// due.
func RemindMilestoneDue(s State, at time.Time) (Reminded, error) {
	if !s.Exists() || s.Type() != MilestoneSettlement || s.Status != Ongoing || s.MilestoneDueAt.IsZero() {
		return Reminded{}, ErrActionNotAllowed
	}
	m, ok := s.nextDueMilestone()
	if !ok {
		return Reminded{}, ErrActionNotAllowed
	}
	if at.Before(*m.DueDate) {
		return Reminded{}, ErrNotDue
	}
	e := Reminded{Reminder: MilestoneDueDeadline, MilestoneID: m.ID, At: at}
	e.NextDueAt = applyMilestoneReminded(s, e).nextMilestoneDue()
	return e, nil
}

// applyMilestoneReminded folds a milestone-due reminder.
func applyMilestoneReminded(s State, e Reminded) State {
	s.MilestonesReminded = append(append([]string{}, s.MilestonesReminded...), e.MilestoneID)
	s.MilestoneDueAt, s.UpdatedAt = e.NextDueAt, e.At
	return s
}
