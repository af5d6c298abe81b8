package escrow

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
)

// Errors with the messages clients of the public API match.
var (
	ErrNotFound         = domain.Invalidf("Escrow not found")
	ErrOtherMerchant    = domain.Invalidf("Escrow does not belong to this merchant")
	ErrActionNotAllowed = domain.Invalidf("Action not allowed")
	ErrNotCheckoutable  = domain.Invalidf("Escrow is not in a valid state for checkout")
	ErrOwnEscrow        = domain.Invalidf("Seller cannot pay for own escrow")
	ErrSoldOut          = domain.Invalidf("Escrow is sold out")
	ErrNotClaimable     = domain.Invalidf("Escrow cannot be claimed yet")
	ErrFeeFrozen        = domain.Invalidf("An additional fee can only be updated while the escrow is pending payment")
	ErrNegativeFee      = domain.Invalidf("additionalFee cannot be negative")
	ErrAmountMismatch   = domain.Invalidf("Amount mismatch")
	MinAmount           = money.Naira(1000)
	// MaxQuantity bounds a listing's units: each sold unit is an escrow.
	MaxQuantity          = 10_000
	MaxImagesAtCreation  = 5
	MaxImages            = 20
	defaultMaxDelivery   = 7
	defaultTimeline      = "days"
	maxPurpose, maxDescr = 200, 2000
)

// Owned checks that s is a live escrow of merchantID in env: another
// environment's escrow does not exist for the caller, another merchant's is
// refused as such.
func Owned(s State, merchantID string, env domain.Environment) error {
	switch {
	case !s.Exists() || s.Environment != env:
		return ErrNotFound
	case s.MerchantID != merchantID:
		return ErrOtherMerchant
	}
	return nil
}

// Draft is a create request after decoding; zero values take defaults.
type Draft struct {
	Amount           money.Amount
	Purpose          string
	Description      string
	WhoPays          string
	MaxDelivery      *int
	DeliveryTimeline string
	TotalQuantity    *int
	CategoryID       string
	ImageURLs        []string
	// AutoRelease nil takes the merchant's default (the application's).
	AutoRelease *bool
	// ExpiresInHours deletes the link if still unpaid that long after its
	// creation (nil: never).
	ExpiresInHours *int
}

// ErrQuantity refuses a listing's unit count outside 1 to MaxQuantity.
var ErrQuantity = domain.Invalidf("totalQuantity must be an integer between 1 and %d", MaxQuantity)

func checkTerms(t Terms, quantity int) error {
	switch {
	case t.Amount < MinAmount || t.Amount%100 != 0:
		return domain.Invalidf("amount must be an integer of at least 1000")
	case strings.TrimSpace(t.Purpose) == "":
		return domain.Invalidf("purpose is required")
	case utf8.RuneCountInString(t.Purpose) > maxPurpose:
		return domain.Invalidf("purpose must be at most %d characters", maxPurpose)
	case utf8.RuneCountInString(t.Description) > maxDescr:
		return domain.Invalidf("description must be at most %d characters", maxDescr)
	case t.WhoPays != Buyer && t.WhoPays != Seller && t.WhoPays != Both:
		return domain.Invalidf("whoPays must be one of buyer, seller, both")
	case t.MaxDelivery < 1 || t.MaxDelivery > 365:
		return domain.Invalidf("maxDelivery must be an integer between 1 and 365")
	case timelineUnits[t.DeliveryTimeline] == 0:
		return domain.Invalidf("deliveryTimeline must be one of minutes, hours, days")
	case quantity < 1 || quantity > MaxQuantity:
		return ErrQuantity
	}
	return nil
}

// Create decides a new escrow link. sellerID is "" when the merchant sells
// as itself (the caller has checked it may).
func Create(id, token, merchantID string, env domain.Environment, sellerID string, fees FeeTerms, d Draft, at time.Time) (Created, error) {
	t := Terms{Amount: d.Amount, Purpose: strings.TrimSpace(d.Purpose), Description: d.Description, WhoPays: WhoPays(d.WhoPays),
		MaxDelivery: defaultMaxDelivery, DeliveryTimeline: defaultTimeline, CategoryID: d.CategoryID, AutoRelease: d.AutoRelease != nil && *d.AutoRelease}
	if d.MaxDelivery != nil {
		t.MaxDelivery = *d.MaxDelivery
	}
	if d.DeliveryTimeline != "" {
		t.DeliveryTimeline = d.DeliveryTimeline
	}
	qty := 1
	if d.TotalQuantity != nil {
		qty = *d.TotalQuantity
	}
	if err := checkTerms(t, qty); err != nil {
		return Created{}, err
	}
	if err := checkPayable(t, fees, 0); err != nil {
		return Created{}, err
	}
	if len(d.ImageURLs) > MaxImagesAtCreation {
		return Created{}, domain.Invalidf("imageUrl accepts at most %d images", MaxImagesAtCreation)
	}
	expires, err := expiryOf(d.ExpiresInHours, at)
	if err != nil {
		return Created{}, err
	}
	return Created{ExpiresAt: expires, ID: id, PaymentToken: token, MerchantID: merchantID, Environment: env, SellerID: sellerID, Terms: t,
		FeeTerms: fees, Fee: Fee(t.Amount, fees.EscrowFeeBps), AdditionalFeeRefundable: true,
		ImageURLs: append([]string{}, d.ImageURLs...), TotalQuantity: qty, Channel: "api", At: at}, nil
}

// Patch is an edit: nil / empty fields are unchanged.
type Patch struct {
	Amount           *money.Amount
	Purpose          *string
	Description      *string
	WhoPays          *string
	MaxDelivery      *int
	DeliveryTimeline *string
	TotalQuantity    *int
	CategoryID       *string
	AutoRelease      *bool
	AddImages        []string
}

// Edit decides a seller's edit of an unpaid link; the fee is recomputed.
func Edit(s State, seller string, p Patch, at time.Time) (Edited, error) {
	if !s.Exists() || s.SellerID != seller || s.ParentID != "" || !s.Allows(ActEdit) {
		return Edited{}, ErrActionNotAllowed
	}
	t, qty := s.Terms, s.TotalQuantity
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	if p.Amount != nil {
		t.Amount = *p.Amount
	}
	set(&t.Purpose, p.Purpose)
	set(&t.Description, p.Description)
	if p.WhoPays != nil {
		t.WhoPays = WhoPays(*p.WhoPays)
	}
	if p.MaxDelivery != nil {
		t.MaxDelivery = *p.MaxDelivery
	}
	set(&t.DeliveryTimeline, p.DeliveryTimeline)
	set(&t.CategoryID, p.CategoryID)
	if p.AutoRelease != nil {
		t.AutoRelease = *p.AutoRelease
	}
	if p.TotalQuantity != nil {
		qty = *p.TotalQuantity
	}
	t.Purpose = strings.TrimSpace(t.Purpose)
	check := qty
	if p.TotalQuantity == nil && s.MultiUnit {
		check = max(qty, 1) // a sold-out link may still be edited (or restocked)
	}
	if err := checkTerms(t, check); err != nil {
		return Edited{}, err
	}
	if err := checkPayable(t, s.FeeTerms, s.AdditionalFee); err != nil {
		return Edited{}, err
	}
	if len(s.ImageURLs)+len(p.AddImages) > MaxImages {
		return Edited{}, domain.Invalidf("imageUrl accepts at most %d images in total", MaxImages)
	}
	return Edited{Terms: t, Fee: Fee(t.Amount, s.FeeTerms.EscrowFeeBps), AddImages: p.AddImages, Quantity: qty, At: at}, nil
}

// Delete decides the seller's removal of an unpaid link.
func Delete(s State, seller string, at time.Time) (Deleted, error) {
	if !s.Exists() || s.SellerID != seller || !s.Allows(ActDelete) {
		return Deleted{}, ErrActionNotAllowed
	}
	return Deleted{At: at}, nil
}

// SetAdditionalFee decides the merchant's additional fee on an unpaid
// standard escrow; refundable nil keeps the current setting.
func SetAdditionalFee(s State, fee money.Amount, refundable *bool, at time.Time) (AdditionalFeeSet, error) {
	if !s.Exists() {
		return AdditionalFeeSet{}, ErrNotFound
	}
	if fee < 0 {
		return AdditionalFeeSet{}, ErrNegativeFee
	}
	if err := s.may(ActSetAdditionalFee); err != nil {
		return AdditionalFeeSet{}, err
	}
	if err := checkPayable(s.Terms, s.FeeTerms, fee); err != nil {
		return AdditionalFeeSet{}, err
	}
	r := s.AdditionalFeeRefundable
	if refundable != nil {
		r = *refundable
	}
	return AdditionalFeeSet{AdditionalFee: fee, Refundable: r, At: at}, nil
}

// CheckCheckout checks that buyerID may pay s now.
func CheckCheckout(s State, buyerID string) error {
	switch {
	case !s.Exists():
		return ErrNotFound
	case !s.Allows(ActPay):
		return refusal(s, ActPay)
	case s.SellerID == buyerID:
		return ErrOwnEscrow
	case s.MultiUnit && s.TotalQuantity < 1:
		return ErrSoldOut
	}
	return nil
}

// Purchase is what paying one link decides: the escrow that is funded (the
// link itself, or a clone of a multi-unit link) and the events of each.
type Purchase struct {
	Funded State          // the funded escrow after the events
	Clone  *Created       // set when a clone was minted
	Link   []domain.Event // events of the paid link (UnitSold or Funded)
	Events []domain.Event // events of the funded escrow when a clone
}

// Buy decides buyerID's purchase of one unit of s, paid by paymentID.
// cloneID and cloneToken name the clone a multi-unit link mints.
func Buy(s State, buyerID, paymentID, cloneID, cloneToken string, at time.Time) (Purchase, error) {
	if err := CheckCheckout(s, buyerID); err != nil {
		return Purchase{}, err
	}
	funded := Funded{BuyerID: buyerID, PaymentID: paymentID, Paid: s.Due(), ReleaseAt: s.releaseAt(at),
		RemindAt: s.remindAt(at, s.Window()), MilestoneDueAt: s.nextMilestoneDue(), At: at}
	if !s.MultiUnit {
		return Purchase{Funded: Apply(s, funded), Link: []domain.Event{funded}}, nil
	}
	clone := Created{ID: cloneID, PaymentToken: cloneToken, MerchantID: s.MerchantID, Environment: s.Environment,
		SellerID: s.SellerID, Terms: s.Terms, FeeTerms: s.FeeTerms, Fee: s.Fee, AdditionalFee: s.AdditionalFee,
		AdditionalFeeRefundable: s.AdditionalFeeRefundable, ImageURLs: s.ImageURLs, TotalQuantity: 1, ParentID: s.ID,
		Channel: s.Channel, SettlementType: s.SettlementType, Milestones: s.Milestones, At: at}
	sold := UnitSold{CloneID: cloneID, Remaining: s.TotalQuantity - 1, At: at}
	return Purchase{Funded: Apply(Apply(State{}, clone), funded), Clone: &clone,
		Link: []domain.Event{sold}, Events: []domain.Event{clone, funded}}, nil
}

// FundingMovement is the money of paying escrows: for each, the buyer's
// main balance moves amount + buyer's fee share into the buyer's escrow
// balance and the additional fee into the merchant's escrow balance.
func FundingMovement(merchantID string, env domain.Environment, buyerID string, escrows []State) ledger.Movement {
	m := ledger.Movement{MerchantID: merchantID, Environment: env}
	for _, s := range escrows {
		m.Move(ledger.CustomerMain(buyerID), ledger.CustomerEscrow(buyerID), s.Held())
		m.Move(ledger.CustomerMain(buyerID), ledger.MerchantEscrow(merchantID), s.AdditionalFee)
	}
	return m
}

// Confirm decides the buyer's confirmation of a standard escrow:
// COMPLETED.
func Confirm(s State, buyerID string, at time.Time) (Released, error) {
	if !s.Exists() || s.BuyerID == "" || s.BuyerID != buyerID {
		return Released{}, ErrActionNotAllowed
	}
	if err := s.may(ActConfirm); err != nil {
		return Released{}, err
	}
	return newReleased(s, s.Completion(Completed), at)
}

// Claim decides the seller's claim after the delivery window: CLAIMED.
func Claim(s State, seller string, at time.Time) (Released, error) {
	if !s.Exists() || s.SellerID != seller || s.BuyerID == "" {
		return Released{}, ErrActionNotAllowed
	}
	if err := s.may(ActClaim); err != nil {
		return Released{}, err
	}
	if at.Before(s.ClaimableAt()) {
		return Released{}, ErrNotClaimable
	}
	return newReleased(s, s.Completion(Claimed), at)
}
