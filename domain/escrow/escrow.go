// Package escrow is the standard escrow: a seller's payment link a buyer
// funds, held until the buyer confirms or the seller claims after the
// delivery window. The aggregate decides every transition; settlements are
// events carrying balanced postings (ledger.Entry), so the merchant's and
// the platform's credits are derived from them, never appended to a
// shared stream.
package escrow

import (
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/webhook"
)

// Status and state values of the spec.
type (
	Status string
	Phase  string
)

const (
	Pending       Status = "PENDING"
	Ongoing       Status = "ONGOING"
	Completed     Status = "COMPLETED"
	Refunded      Status = "REFUNDED"
	Claimed       Status = "CLAIMED"
	Disputed      Status = "DISPUTED"
	Investigating Status = "INVESTIGATING"
	Split         Status = "SPLIT"

	AwaitingPayment Phase = "AWAITING_PAYMENT"
	Opened          Phase = "OPENED"
	Closed          Phase = "CLOSED"
)

// Terminal reports whether s ends the escrow (state CLOSED).
func (s Status) Terminal() bool {
	return s == Completed || s == Claimed || s == Refunded || s == Split
}

// Phase is the state a status belongs to: PENDING awaits payment, a
// terminal status is CLOSED, every other is OPENED.
func (s Status) Phase() Phase {
	switch {
	case s == Pending:
		return AwaitingPayment
	case s.Terminal():
		return Closed
	}
	return Opened
}

// WhoPays says who bears the escrow fee.
type WhoPays string

const (
	Buyer  WhoPays = "buyer"
	Seller WhoPays = "seller"
	Both   WhoPays = "both"
)

// Delivery timeline units.
var timelineUnits = map[string]time.Duration{"minutes": time.Minute, "hours": time.Hour, "days": 24 * time.Hour}

// Terms are what a seller sets on a link (and edits while unpaid).
type Terms struct {
	Amount           money.Amount `json:"amount"`
	Purpose          string       `json:"purpose"`
	Description      string       `json:"description"`
	WhoPays          WhoPays      `json:"whoPays"`
	MaxDelivery      int          `json:"maxDelivery"`
	DeliveryTimeline string       `json:"deliveryTimeline"`
	CategoryID       string       `json:"categoryId,omitempty"`
	// AutoRelease: the service releases the escrow when its delivery
	// window elapses (deadlines.go).
	AutoRelease bool `json:"autoRelease,omitempty"`
}

// FeeTerms freeze the merchant's fee policy at creation (an edit
// recomputes the fee with the same rates).
type FeeTerms struct {
	EscrowFeeBps  int64 `json:"escrowFeeBps"`
	CommissionBps int64 `json:"commissionBps"`
}

// State is the folded escrow.
type State struct {
	ID                      string             `json:"id"`
	PaymentToken            string             `json:"paymentToken"`
	MerchantID              string             `json:"merchantId"`
	Environment             domain.Environment `json:"environment"`
	SellerID                string             `json:"sellerId,omitempty"` // "" when the merchant sells as itself
	BuyerID                 string             `json:"buyerId,omitempty"`
	Terms                   Terms              `json:"terms"`
	FeeTerms                FeeTerms           `json:"feeTerms"`
	Fee                     money.Amount       `json:"fee"`
	AdditionalFee           money.Amount       `json:"additionalFee"`
	AdditionalFeeRefundable bool               `json:"additionalFeeRefundable"`
	ImageURLs               []string           `json:"imageUrl"`
	TotalQuantity           int                `json:"totalQuantity"`
	MultiUnit               bool               `json:"multiUnit,omitempty"` // a link whose purchases are clones
	ParentID                string             `json:"parentId,omitempty"`
	Channel                 string             `json:"channel"`
	Status                  Status             `json:"status"`
	Logs                    []string           `json:"logs"`
	PaymentID               string             `json:"paymentId,omitempty"`
	PaidAt                  time.Time          `json:"paidAt,omitempty"`
	CompletedAt             time.Time          `json:"completedAt,omitempty"`
	Deleted                 bool               `json:"deleted,omitempty"`
	CreatedAt               time.Time          `json:"createdAt"`
	UpdatedAt               time.Time          `json:"updatedAt"`
	// SettlementType is STANDARD, MILESTONE or VAULT ("" in states stored
	// before it was recorded: STANDARD; see Type).
	SettlementType SettlementType `json:"settlementType,omitempty"`
	Disputes       []DisputeEntry `json:"disputes,omitempty"`
	Split          *SplitResult   `json:"split,omitempty"`
	RefundedBy     string         `json:"refundedBy,omitempty"`
	Milestones     []Milestone    `json:"milestones,omitempty"`
	Participants   []Participant  `json:"participants,omitempty"`
	WinnerID       string         `json:"winnerId,omitempty"`
	// ExpiresAt is when an unpaid link is deleted; ReleaseAt when a funded
	// auto-release escrow is released (zero: never; deadlines.go).
	ExpiresAt time.Time `json:"expiresAt,omitempty"`
	ReleaseAt time.Time `json:"releaseAt,omitempty"`
	// Extensions and ExtendedBy count the buyer's window extensions and
	// what they added, in deliveryTimeline units (deadlines.go).
	Extensions int `json:"extensions,omitempty"`
	ExtendedBy int `json:"extendedBy,omitempty"`
	// RemindAt is when the window-ending reminder is due; Reminded that it
	// was sent.
	RemindAt time.Time `json:"remindAt,omitempty"`
	Reminded bool      `json:"reminded,omitempty"`
	// PartiallyRefunded is what the merchant's partial refunds returned to
	// the buyer so far, PartialRefunds how many there were (refund.go).
	PartiallyRefunded money.Amount `json:"partiallyRefunded,omitempty"`
	PartialRefunds    int          `json:"partialRefunds,omitempty"`
	// MilestoneDueAt is when the next milestone-due reminder is due (zero:
	// none); MilestonesReminded the milestones reminded of (milestone_due.go).
	MilestoneDueAt     time.Time `json:"milestoneDueAt,omitempty"`
	MilestonesReminded []string  `json:"milestonesReminded,omitempty"`
}

// Type is the escrow's settlement type.
func (s State) Type() SettlementType {
	if s.SettlementType == "" {
		return StandardSettlement
	}
	return s.SettlementType
}

// Exists reports whether the escrow was created and not deleted.
func (s State) Exists() bool { return s.ID != "" && !s.Deleted }

// IsMerchantSale reports whether the merchant sells as itself.
func (s State) IsMerchantSale() bool { return s.SellerID == "" }

// Shares is how an escrow's fee divides between buyer and seller.
type Shares struct {
	Buyer, Seller money.Amount
}

// FeeShares divides the fee by whoPays: the buyer's half of "both" is
// rounded half-up to the kobo and the seller bears the rest.
func FeeShares(fee money.Amount, who WhoPays) Shares {
	switch who {
	case Buyer:
		return Shares{Buyer: fee}
	case Seller:
		return Shares{Seller: fee}
	}
	b := fee.Percent(5000, 1)
	return Shares{Buyer: b, Seller: fee - b}
}

// Fee is the escrow fee of amount: bps of it, rounded half-up to a whole
// naira.
func Fee(amount money.Amount, bps int64) money.Amount { return amount.Percent(bps, 100) }

// Commission is the merchant's share of fee, rounded down to the kobo.
func Commission(fee money.Amount, bps int64) money.Amount {
	return money.Amount(fee.Kobo() * bps / 10_000)
}

// Due is what the buyer pays: amount + buyer's fee share + additionalFee.
func (s State) Due() money.Amount {
	return s.Held() + s.AdditionalFee
}

// Held is what the buyer's escrow balance holds for this escrow once paid.
func (s State) Held() money.Amount { return s.Terms.Amount + s.BuyerFee() }

// BuyerFee is the buyer's share of the escrow fee.
func (s State) BuyerFee() money.Amount { return FeeShares(s.Fee, s.Terms.WhoPays).Buyer }

// ClaimableAt is when the seller may claim: the delivery window (as the
// buyer's extensions left it) after payment.
func (s State) ClaimableAt() time.Time {
	return s.PaidAt.Add(s.Window())
}

// Events.
type (
	Created struct {
		ID                      string             `json:"id"`
		PaymentToken            string             `json:"paymentToken"`
		MerchantID              string             `json:"merchantId"`
		Environment             domain.Environment `json:"environment"`
		SellerID                string             `json:"sellerId,omitempty"`
		Terms                   Terms              `json:"terms"`
		FeeTerms                FeeTerms           `json:"feeTerms"`
		Fee                     money.Amount       `json:"fee"`
		AdditionalFee           money.Amount       `json:"additionalFee"`
		AdditionalFeeRefundable bool               `json:"additionalFeeRefundable"`
		ImageURLs               []string           `json:"imageUrl"`
		TotalQuantity           int                `json:"totalQuantity"`
		ParentID                string             `json:"parentId,omitempty"`
		Channel                 string             `json:"channel"`
		SettlementType          SettlementType     `json:"settlementType,omitempty"`
		Milestones              []Milestone        `json:"milestones,omitempty"`
		// ExpiresAt: an unpaid link is deleted then (zero: never).
		ExpiresAt time.Time `json:"expiresAt,omitempty"`
		At        time.Time `json:"at"`
	}
	Edited struct {
		Terms     Terms        `json:"terms"`
		Fee       money.Amount `json:"fee"`
		AddImages []string     `json:"addImages,omitempty"`
		Quantity  int          `json:"totalQuantity"`
		At        time.Time    `json:"at"`
	}
	AdditionalFeeSet struct {
		AdditionalFee money.Amount `json:"additionalFee"`
		Refundable    bool         `json:"additionalFeeRefundable"`
		At            time.Time    `json:"at"`
	}
	Deleted struct {
		At time.Time `json:"at"`
	}
	// UnitSold takes one unit of a multi-unit link for a clone.
	UnitSold struct {
		CloneID   string    `json:"cloneId"`
		Remaining int       `json:"remaining"`
		At        time.Time `json:"at"`
	}
	// Funded records the buyer's payment (the money moved in the payment's
	// own event, which covers every escrow it paid).
	Funded struct {
		BuyerID   string       `json:"buyerId"`
		PaymentID string       `json:"paymentId"`
		Paid      money.Amount `json:"paid"`
		// ReleaseAt is when the service releases an auto-release escrow:
		// the delivery window by the terms at payment (zero: never).
		ReleaseAt time.Time `json:"releaseAt,omitempty"`
		// RemindAt is when the buyer and seller are reminded that the
		// window is ending (zero: never; deadlines.go).
		RemindAt time.Time `json:"remindAt,omitempty"`
		// MilestoneDueAt is when the first milestone-due reminder is due
		// (zero: never; milestone_due.go).
		MilestoneDueAt time.Time `json:"milestoneDueAt,omitempty"`
		At             time.Time `json:"at"`
	}
	// Released settles the escrow to the seller (COMPLETED on the buyer's
	// confirmation, CLAIMED on the seller's claim).
	Released struct {
		Status   Status          `json:"status"`
		Movement ledger.Movement `json:"movement"`
		Records  []ledger.Record `json:"records"`
		At       time.Time       `json:"at"`
	}
)

func (Created) EventType() string          { return "escrow.created" }
func (Edited) EventType() string           { return "escrow.edited" }
func (AdditionalFeeSet) EventType() string { return "escrow.additional_fee_set" }
func (Deleted) EventType() string          { return "escrow.deleted" }
func (UnitSold) EventType() string         { return "escrow.unit_sold" }
func (Funded) EventType() string           { return "escrow.funded" }
func (Released) EventType() string         { return "escrow.released" }

func (e Released) Ledger() ledger.Effect {
	return ledger.Effect{Movement: &e.Movement, Records: e.Records}
}

// newReleased is the event of settlement st of s (confirm, claim).
func newReleased(s State, st Settlement, at time.Time) (Released, error) {
	m, records, err := st.Entry(s, at)
	return Released{Status: st.Status, Movement: m, Records: records, At: at}, err
}

// Registry decodes escrow events.
var Registry = domain.NewRegistry(
	func() domain.Event { return &VaultCreated{} }, func() domain.Event { return &VaultSettled{} },
	func() domain.Event { return &Created{} },
	func() domain.Event { return &Edited{} },
	func() domain.Event { return &AdditionalFeeSet{} },
	func() domain.Event { return &Deleted{} },
	func() domain.Event { return &UnitSold{} },
	func() domain.Event { return &Funded{} },
	func() domain.Event { return &Released{} },
	func() domain.Event { return &DisputeSubmitted{} },
	func() domain.Event { return &DisputeResolved{} },
	func() domain.Event { return &MilestonesSet{} },
	func() domain.Event { return &MilestoneConfirmed{} },
	func() domain.Event { return &WindowExtended{} },
	func() domain.Event { return &Reminded{} },
	func() domain.Event { return &PartiallyRefunded{} },
	// A redelivery of a webhook of the escrow: on its timeline, and no
	// change to its state (Apply has no case for it).
	func() domain.Event { return &webhook.RedeliveryRequested{} },
)

// Apply folds an escrow event. It copies slices before changing them.
func Apply(s State, ev domain.Event) State {
	if s, ok := applyMilestones(s, ev); ok {
		return s
	}
	if s, ok := applyVault(s, ev); ok {
		return s
	}
	if s, ok := applyDeadlines(s, ev); ok {
		return s
	}
	if s, ok := applyRefund(s, ev); ok {
		return s
	}
	switch e := ev.(type) {
	case Created:
		s = State{ID: e.ID, PaymentToken: e.PaymentToken, MerchantID: e.MerchantID, Environment: e.Environment,
			SellerID: e.SellerID, Terms: e.Terms, FeeTerms: e.FeeTerms, Fee: e.Fee, AdditionalFee: e.AdditionalFee,
			AdditionalFeeRefundable: e.AdditionalFeeRefundable, ImageURLs: append([]string{}, e.ImageURLs...),
			TotalQuantity: e.TotalQuantity, MultiUnit: e.ParentID == "" && e.TotalQuantity > 1, ParentID: e.ParentID,
			Channel: e.Channel, Status: Pending, Logs: []string{string(Pending)},
			CreatedAt: e.At, UpdatedAt: e.At, SettlementType: e.SettlementType, Milestones: e.Milestones, ExpiresAt: e.ExpiresAt}
		if s.SettlementType == "" {
			s.SettlementType = StandardSettlement
		}
	case Edited:
		s.Terms, s.Fee, s.TotalQuantity, s.UpdatedAt = e.Terms, e.Fee, e.Quantity, e.At
		// A multi-unit link stays one (its last unit is sold as a clone too).
		s.MultiUnit = s.MultiUnit || s.ParentID == "" && e.Quantity > 1
		if len(e.AddImages) > 0 {
			s.ImageURLs = append(append([]string{}, s.ImageURLs...), e.AddImages...)
		}
	case AdditionalFeeSet:
		s.AdditionalFee, s.AdditionalFeeRefundable, s.UpdatedAt = e.AdditionalFee, e.Refundable, e.At
	case Deleted:
		s.Deleted, s.UpdatedAt = true, e.At
	case UnitSold:
		s.TotalQuantity, s.UpdatedAt = e.Remaining, e.At
	case Funded:
		s.BuyerID, s.PaymentID, s.PaidAt, s.UpdatedAt = e.BuyerID, e.PaymentID, e.At, e.At
		s.ReleaseAt, s.RemindAt, s.MilestoneDueAt = e.ReleaseAt, e.RemindAt, e.MilestoneDueAt
		s.Status = Ongoing
		s.Logs = append(append([]string{}, s.Logs...), string(Ongoing))
	case Released:
		s = s.closed(e.Status, e.At)
	case DisputeSubmitted:
		s.Status, s.UpdatedAt = e.Status, e.At
		s.Logs = append(append([]string{}, s.Logs...), string(e.Status))
		s.Disputes = append(append([]DisputeEntry{}, s.Disputes...), e.Entry)
	case DisputeResolved:
		s = s.closed(e.Status, e.At)
		s.AdditionalFeeRefundable, s.Split = e.AdditionalFeeRefundable, e.Split
		if e.Entry != nil {
			s.Disputes = append(append([]DisputeEntry{}, s.Disputes...), *e.Entry)
		}
		if e.Status == Refunded {
			s.RefundedBy = e.ResolvedBy
		}
		s.Milestones = settleMilestones(s.Milestones, e.Status, e.At)
	}
	return s
}

// closed moves s to terminal status st at at.
func (s State) closed(st Status, at time.Time) State {
	s.Status, s.CompletedAt, s.UpdatedAt = st, at, at
	s.Logs = append(append([]string{}, s.Logs...), string(st))
	return s
}
