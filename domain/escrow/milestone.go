package escrow

import (
	"time"

	"github.com/escrowd/escrowd/domain/money"
)

// MilestoneStatus is where a milestone's money is.
type MilestoneStatus string

const (
	MilestonePending  MilestoneStatus = "PENDING"
	MilestoneReleased MilestoneStatus = "RELEASED"
	MilestoneRefunded MilestoneStatus = "REFUNDED"
	MilestoneSplit    MilestoneStatus = "SPLIT"
)

// Milestone is one part of a milestone escrow, released on its own.
type Milestone struct {
	ID          string          `json:"id"`
	Title       string          `json:"title"`
	Description string          `json:"description"`
	Amount      money.Amount    `json:"amount"`
	DueDate     *time.Time      `json:"dueDate,omitempty"`
	CustomerID  string          `json:"customerId,omitempty"` // beneficiary; "" = the seller
	Status      MilestoneStatus `json:"status"`
	ReleasedAt  *time.Time      `json:"releasedAt,omitempty"`
}

// allMilestonesReleased reports whether a milestone escrow released every
// milestone (nothing is left to dispute).
func (s State) allMilestonesReleased() bool {
	for _, m := range s.Milestones {
		if m.Status != MilestoneReleased {
			return false
		}
	}
	return len(s.Milestones) > 0
}

// settleMilestones marks the milestones still pending as a resolution with
// status st settles them (copying the slice).
func settleMilestones(ms []Milestone, st Status, at time.Time) []Milestone {
	if len(ms) == 0 {
		return ms
	}
	out := append([]Milestone{}, ms...)
	for i := range out {
		if out[i].Status != MilestonePending {
			continue
		}
		switch st {
		case Completed, Claimed:
			t := at
			out[i].Status, out[i].ReleasedAt = MilestoneReleased, &t
		case Refunded:
			out[i].Status = MilestoneRefunded
		case Split:
			out[i].Status = MilestoneSplit
		}
	}
	return out
}
