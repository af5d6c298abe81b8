package escrow

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
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

// Milestone rules and messages.
var (
	ErrMilestoneSum              = domain.Invalidf("The sum of milestone amounts must equal the escrow amount")
	ErrTooFewMilestones          = domain.Invalidf("A milestone escrow needs at least 2 milestones")
	ErrTooManyMilestones         = domain.Invalidf("A milestone escrow allows at most %d milestones", MaxMilestones)
	ErrMilestoneWhoPays          = domain.Invalidf("Milestone escrows allow whoPays buyer only")
	ErrDueDatePast               = domain.Invalidf("dueDate must be a future date")
	ErrMilestoneOrder            = domain.Invalidf("Milestones must be confirmed in order")
	ErrMilestoneNotFound         = domain.Invalidf("Milestone not found")
	ErrMilestoneReleased         = domain.Invalidf("Milestone has already been released")
	ErrConvertAdditionalFee      = domain.Invalidf("Remove the additional fee before converting")
	MinMilestones, MaxMilestones = 2, 50
)

// A milestone's title and description, in characters: fifty milestones
// at these caps, with the escrow's own terms, fit one event
// (domain.MaxEventBytes), as the escrow's creation records them all.
const (
	MaxMilestoneTitle       = 100
	MaxMilestoneDescription = 400
)

// MilestoneDraft is a milestone as a request gives it; the caller names
// it (ID) and has checked that a beneficiary is the merchant's customer.
type MilestoneDraft struct {
	ID          string
	Title       string
	Description string
	Amount      money.Amount
	DueDate     *time.Time
	CustomerID  string
}

// checkMilestones checks a milestone set against the escrow amount and
// returns it as pending milestones.
func checkMilestones(drafts []MilestoneDraft, amount money.Amount, at time.Time) ([]Milestone, error) {
	switch {
	case len(drafts) < MinMilestones:
		return nil, ErrTooFewMilestones
	case len(drafts) > MaxMilestones:
		return nil, ErrTooManyMilestones
	}
	out := make([]Milestone, len(drafts))
	var sum money.Amount
	for i, d := range drafts {
		title := strings.TrimSpace(d.Title)
		switch {
		case title == "":
			return nil, domain.Invalidf("milestones[%d].title is required", i)
		case utf8.RuneCountInString(title) > MaxMilestoneTitle:
			return nil, domain.Invalidf("milestones[%d].title must be at most %d characters", i, MaxMilestoneTitle)
		case utf8.RuneCountInString(d.Description) > MaxMilestoneDescription:
			return nil, domain.Invalidf("milestones[%d].description must be at most %d characters", i, MaxMilestoneDescription)
		case d.Amount < money.Naira(1) || d.Amount%100 != 0 || d.Amount > money.Max:
			return nil, domain.Invalidf("milestones[%d].amount must be a positive integer", i)
		case d.DueDate != nil && !d.DueDate.After(at):
			return nil, ErrDueDatePast
		}
		sum += d.Amount
		out[i] = Milestone{ID: d.ID, Title: title, Description: d.Description, Amount: d.Amount, DueDate: d.DueDate,
			CustomerID: d.CustomerID, Status: MilestonePending}
	}
	if sum != amount {
		return nil, ErrMilestoneSum
	}
	return out, nil
}

// CreateMilestones decides a new milestone escrow: the whole amount is
// paid at once and released milestone by milestone.
func CreateMilestones(id, token, merchantID string, env domain.Environment, sellerID string, fees FeeTerms, d Draft,
	drafts []MilestoneDraft, at time.Time) (Created, error) {
	if d.WhoPays == "" {
		d.WhoPays = string(Buyer)
	}
	if WhoPays(d.WhoPays) != Buyer {
		return Created{}, ErrMilestoneWhoPays
	}
	if d.TotalQuantity != nil && *d.TotalQuantity != 1 {
		return Created{}, domain.Invalidf("totalQuantity must be 1 for a milestone escrow")
	}
	if d.AutoRelease != nil && *d.AutoRelease {
		return Created{}, domain.Invalidf("autoRelease applies to standard escrows only")
	}
	c, err := Create(id, token, merchantID, env, sellerID, fees, d, at)
	if err != nil {
		return Created{}, err
	}
	if c.Milestones, err = checkMilestones(drafts, c.Terms.Amount, at); err != nil {
		return Created{}, err
	}
	c.SettlementType = MilestoneSettlement
	return c, nil
}

// MilestonesSet replaces an unpaid escrow's milestones (an edit of a
// milestone escrow, or a standard escrow converted to one), with the
// terms and fee that go with them.
type MilestonesSet struct {
	Terms      Terms        `json:"terms"`
	Fee        money.Amount `json:"fee"`
	Milestones []Milestone  `json:"milestones"`
	Converted  bool         `json:"converted,omitempty"` // a standard escrow became a milestone escrow
	At         time.Time    `json:"at"`
}

// MilestoneConfirmed pays one milestone to its beneficiary (or the seller);
// the last one also collects the fee and completes the escrow.
type MilestoneConfirmed struct {
	MilestoneID string          `json:"milestoneId"`
	Status      Status          `json:"status,omitempty"` // COMPLETED on the last milestone
	Movement    ledger.Movement `json:"movement"`
	Records     []ledger.Record `json:"records"`
	// MilestoneDueAt is when the next milestone-due reminder is due once
	// this milestone is released (zero: none; milestone_due.go).
	MilestoneDueAt time.Time `json:"milestoneDueAt,omitempty"`
	At             time.Time `json:"at"`
}

func (MilestonesSet) EventType() string      { return "escrow.milestones_set" }
func (MilestoneConfirmed) EventType() string { return "escrow.milestone_confirmed" }

func (e MilestoneConfirmed) Ledger() ledger.Effect {
	return ledger.Effect{Movement: &e.Movement, Records: e.Records}
}

// EditMilestones decides the seller's edit of an unpaid milestone escrow:
// the patch's terms (whoPays stays buyer) and, when drafts are given, a
// new milestone set (new ids); the fee is recomputed.
func EditMilestones(s State, seller string, p Patch, drafts []MilestoneDraft, at time.Time) (MilestonesSet, error) {
	if !s.Exists() || s.SellerID != seller || !s.Allows(ActEditMilestones) {
		return MilestonesSet{}, ErrActionNotAllowed
	}
	return s.setMilestones(p, drafts, false, at)
}

// ConvertToMilestones decides the seller's conversion of an unpaid
// standard escrow into a milestone escrow; whoPays becomes buyer.
func ConvertToMilestones(s State, seller string, amount *money.Amount, drafts []MilestoneDraft, at time.Time) (MilestonesSet, error) {
	if !s.Exists() || s.SellerID != seller || s.ParentID != "" || s.MultiUnit || !s.Allows(ActConvert) {
		return MilestonesSet{}, ErrActionNotAllowed
	}
	if s.AdditionalFee > 0 {
		return MilestonesSet{}, ErrConvertAdditionalFee
	}
	buyer := string(Buyer)
	return s.setMilestones(Patch{Amount: amount, WhoPays: &buyer}, drafts, true, at)
}

func (s State) setMilestones(p Patch, drafts []MilestoneDraft, converted bool, at time.Time) (MilestonesSet, error) {
	if p.WhoPays != nil && WhoPays(*p.WhoPays) != Buyer {
		return MilestonesSet{}, ErrMilestoneWhoPays
	}
	if p.TotalQuantity != nil && *p.TotalQuantity != 1 {
		return MilestonesSet{}, domain.Invalidf("totalQuantity must be 1 for a milestone escrow")
	}
	if len(p.AddImages) > 0 {
		return MilestonesSet{}, domain.Invalidf("imageUrl cannot be changed here")
	}
	t := s.Terms
	apply := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	if p.Amount != nil {
		t.Amount = *p.Amount
	}
	apply(&t.Purpose, p.Purpose)
	apply(&t.Description, p.Description)
	apply(&t.DeliveryTimeline, p.DeliveryTimeline)
	apply(&t.CategoryID, p.CategoryID)
	if p.MaxDelivery != nil {
		t.MaxDelivery = *p.MaxDelivery
	}
	t.WhoPays, t.Purpose = Buyer, strings.TrimSpace(t.Purpose)
	if err := checkTerms(t, 1); err != nil {
		return MilestonesSet{}, err
	}
	if err := checkPayable(t, s.FeeTerms, s.AdditionalFee); err != nil {
		return MilestonesSet{}, err
	}
	var ms []Milestone
	var err error
	if drafts != nil {
		ms, err = checkMilestones(drafts, t.Amount, at)
	} else {
		// The set is kept: it must still add up to the (new) amount.
		var sum money.Amount
		for _, m := range s.Milestones {
			sum += m.Amount
		}
		if sum != t.Amount {
			err = ErrMilestoneSum
		}
		ms = s.Milestones
	}
	if err != nil {
		return MilestonesSet{}, err
	}
	return MilestonesSet{Terms: t, Fee: Fee(t.Amount, s.FeeTerms.EscrowFeeBps), Milestones: ms, Converted: converted, At: at}, nil
}

// ReleaseMilestone decides the buyer's confirmation of milestone id: only
// the earliest milestone still pending may be released.
func ReleaseMilestone(s State, buyerID, milestoneID string, at time.Time) (MilestoneConfirmed, error) {
	if !s.Exists() || s.BuyerID == "" || s.BuyerID != buyerID {
		return MilestoneConfirmed{}, ErrActionNotAllowed
	}
	if err := s.may(ActReleaseMilestone); err != nil {
		return MilestoneConfirmed{}, err
	}
	next, pending := -1, 0
	for i, m := range s.Milestones {
		if m.Status == MilestonePending {
			if next < 0 {
				next = i
			}
			pending++
		}
	}
	var m Milestone
	for _, x := range s.Milestones {
		if x.ID == milestoneID {
			m = x
		}
	}
	switch {
	case m.ID == "":
		return MilestoneConfirmed{}, ErrMilestoneNotFound
	case m.Status != MilestonePending:
		return MilestoneConfirmed{}, ErrMilestoneReleased
	case s.Milestones[next].ID != milestoneID:
		return MilestoneConfirmed{}, ErrMilestoneOrder
	}
	st := Settlement{Holds: []Hold{{CustomerID: s.BuyerID, Amount: m.Amount}}, Payouts: []Payout{s.milestonePayout(m)}}
	if pending == 1 { // the last: the escrow completes and its fee is collected
		st = s.Completion(Completed)
	}
	mv, records, err := st.Entry(s, at)
	e := MilestoneConfirmed{MilestoneID: milestoneID, Status: st.Status, Movement: mv, Records: records, At: at}
	if st.Status == "" {
		e.MilestoneDueAt = Apply(s, e).nextMilestoneDue()
	}
	return e, err
}

// applyMilestones folds the milestone events.
func applyMilestones(s State, ev domain.Event) (State, bool) {
	switch e := ev.(type) {
	case MilestonesSet:
		s.Terms, s.Fee, s.UpdatedAt = e.Terms, e.Fee, e.At
		s.Milestones = append([]Milestone{}, e.Milestones...)
		if e.Converted {
			s.SettlementType = MilestoneSettlement
		}
	case MilestoneConfirmed:
		ms := append([]Milestone{}, s.Milestones...)
		for i := range ms {
			if ms[i].ID == e.MilestoneID {
				t := e.At
				ms[i].Status, ms[i].ReleasedAt = MilestoneReleased, &t
			}
		}
		s.Milestones, s.UpdatedAt, s.MilestoneDueAt = ms, e.At, e.MilestoneDueAt
		if e.Status != "" {
			s = s.closed(e.Status, e.At)
		}
	default:
		return s, false
	}
	return s, true
}
