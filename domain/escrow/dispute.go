package escrow

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
)

// Dispute entry types: the buyer opens, the seller answers, the merchant
// resolves.
const (
	EntryBuyer  = "buyer"
	EntrySeller = "seller"
	EntryAdmin  = "admin"
)

// DisputeEntry is one side's statement in a dispute.
type DisputeEntry struct {
	UserID    string    `json:"userId"`
	Name      string    `json:"name"`
	Message   string    `json:"message"`
	ProofURL  string    `json:"proofUrl"`
	Type      string    `json:"type"`
	CreatedAt time.Time `json:"createdAt"`
}

// SplitResult is how a SPLIT resolution divided the held pool.
type SplitResult struct {
	SellerAmount money.Amount `json:"sellerAmount"`
	BuyerAmount  money.Amount `json:"buyerAmount"`
	Pool         money.Amount `json:"pool"`
	ResolvedAt   time.Time    `json:"resolvedAt"`
}

// Events of a dispute.
type (
	// DisputeSubmitted records a party's entry: the buyer's opens the
	// dispute (DISPUTED), the seller's answers it (INVESTIGATING).
	DisputeSubmitted struct {
		Entry  DisputeEntry `json:"entry"`
		Status Status       `json:"status"`
		At     time.Time    `json:"at"`
	}
	// DisputeResolved is the merchant's ruling and the settlement it makes.
	DisputeResolved struct {
		Status                  Status          `json:"status"`
		ResolvedBy              string          `json:"resolvedBy"` // the merchant
		AdditionalFeeRefundable bool            `json:"additionalFeeRefundable"`
		Split                   *SplitResult    `json:"split,omitempty"`
		Entry                   *DisputeEntry   `json:"entry,omitempty"` // the merchant's, when it wrote or attached one
		Movement                ledger.Movement `json:"movement"`
		Records                 []ledger.Record `json:"records"`
		At                      time.Time       `json:"at"`
	}
)

func (DisputeSubmitted) EventType() string { return "escrow.dispute_submitted" }
func (DisputeResolved) EventType() string  { return "escrow.dispute_resolved" }

func (e DisputeResolved) Ledger() ledger.Effect {
	return ledger.Effect{Movement: &e.Movement, Records: e.Records}
}

// Errors of disputes.
var (
	ErrAccessDenied          = domain.Errorf(domain.Unauthenticated, "Access denied")
	ErrBuyerFirst            = domain.Invalidf("Only the buyer can open a dispute")
	ErrBuyerAlreadyDisputed  = domain.Invalidf("Buyer already submitted Dispute")
	ErrSellerAlreadyDisputed = domain.Invalidf("Seller already submitted Dispute")
	maxDisputeMessage        = 5000
)

// Submission is a party's dispute entry as the request gave it.
type Submission struct {
	CustomerID string // who submits
	Name       string // their display name
	Message    string
	ProofURL   string
}

func (s State) hasEntry(typ string) bool {
	for _, e := range s.Disputes {
		if e.Type == typ {
			return true
		}
	}
	return false
}

// DisputedAt is when the buyer opened the dispute (zero if never).
func (s State) DisputedAt() time.Time {
	for _, e := range s.Disputes {
		if e.Type == EntryBuyer {
			return e.CreatedAt
		}
	}
	return time.Time{}
}

func checkMessage(field, msg string, required bool) error {
	switch {
	case required && strings.TrimSpace(msg) == "":
		return domain.Invalidf("%s is required", field)
	case utf8.RuneCountInString(msg) > maxDisputeMessage:
		return domain.Invalidf("%s must be at most %d characters", field, maxDisputeMessage)
	}
	return nil
}

// SubmitDispute decides a party's entry: the buyer opens a dispute on an
// open escrow, then the seller may answer it once.
func SubmitDispute(s State, sub Submission, at time.Time) (DisputeSubmitted, error) {
	if !s.Exists() {
		return DisputeSubmitted{}, ErrNotFound
	}
	if s.Type() == VaultSettlement {
		return DisputeSubmitted{}, ErrVaultNotDisputable
	}
	typ := EntryBuyer
	switch {
	case s.BuyerID != "" && sub.CustomerID == s.BuyerID:
	case s.SellerID != "" && sub.CustomerID == s.SellerID:
		typ = EntrySeller
	default:
		return DisputeSubmitted{}, ErrAccessDenied
	}
	if s.Status.Phase() != Opened {
		return DisputeSubmitted{}, refusal(s, ActOpenDispute)
	}
	if err := checkMessage("message", sub.Message, true); err != nil {
		return DisputeSubmitted{}, err
	}
	entry := DisputeEntry{UserID: sub.CustomerID, Name: sub.Name, Message: sub.Message, ProofURL: sub.ProofURL, Type: typ, CreatedAt: at}
	if typ == EntryBuyer {
		if s.hasEntry(EntryBuyer) {
			return DisputeSubmitted{}, ErrBuyerAlreadyDisputed
		}
		if err := s.may(ActOpenDispute); err != nil {
			return DisputeSubmitted{}, err
		}
		return DisputeSubmitted{Entry: entry, Status: Disputed, At: at}, nil
	}
	switch {
	case s.hasEntry(EntrySeller):
		return DisputeSubmitted{}, ErrSellerAlreadyDisputed
	case !s.hasEntry(EntryBuyer):
		return DisputeSubmitted{}, ErrBuyerFirst
	}
	if err := s.may(ActAnswerDispute); err != nil {
		return DisputeSubmitted{}, err
	}
	return DisputeSubmitted{Entry: entry, Status: Investigating, At: at}, nil
}

// Resolution is the merchant's ruling as the request gave it.
type Resolution struct {
	Status                    string
	SellerAmount, BuyerAmount *money.Amount // SPLIT only
	AdditionalFeeRefundable   *bool         // nil: the escrow's setting
	MerchantID, MerchantName  string
	Message, ProofURL         string // optional: the merchant's entry
}

// Resolve decides the merchant's resolution of a dispute: COMPLETED
// releases what is held to the seller, REFUNDED returns it to the buyer,
// SPLIT divides it; the fee is collected in every case.
func Resolve(s State, r Resolution, at time.Time) (DisputeResolved, error) {
	status := Status(strings.ToUpper(strings.TrimSpace(r.Status)))
	switch {
	case !s.Exists():
		return DisputeResolved{}, ErrNotFound
	case status != Completed && status != Refunded && status != Split:
		return DisputeResolved{}, domain.Invalidf("status must be one of COMPLETED, REFUNDED, SPLIT")
	case status != Split && (r.SellerAmount != nil || r.BuyerAmount != nil):
		return DisputeResolved{}, domain.Invalidf("sellerAmount and buyerAmount are only allowed with SPLIT")
	case status == Split && (r.SellerAmount == nil || r.BuyerAmount == nil):
		return DisputeResolved{}, domain.Invalidf("sellerAmount and buyerAmount are required with SPLIT")
	case status == Split && (*r.SellerAmount < 0 || *r.BuyerAmount < 0):
		return DisputeResolved{}, domain.Invalidf("sellerAmount and buyerAmount must not be negative")
	}
	if err := checkMessage("resolution", r.Message, false); err != nil {
		return DisputeResolved{}, err
	}
	if err := s.may(ActResolve); err != nil {
		return DisputeResolved{}, err
	}
	refundable := s.AdditionalFeeRefundable
	if r.AdditionalFeeRefundable != nil {
		refundable = *r.AdditionalFeeRefundable
	}
	ev := DisputeResolved{Status: status, ResolvedBy: r.MerchantID, AdditionalFeeRefundable: refundable, At: at}
	var st Settlement
	switch status {
	case Completed:
		st = s.Completion(Completed)
	case Refunded:
		st = s.Refund(refundable)
	case Split:
		pool := s.HeldPool()
		if *r.SellerAmount+*r.BuyerAmount != pool {
			return DisputeResolved{}, domain.Invalidf("sellerAmount and buyerAmount must add up to the held amount of %s", pool)
		}
		st = s.SplitBetween(*r.SellerAmount, *r.BuyerAmount, refundable)
		ev.Split = &SplitResult{SellerAmount: *r.SellerAmount, BuyerAmount: *r.BuyerAmount, Pool: pool, ResolvedAt: at}
	}
	if strings.TrimSpace(r.Message) != "" || r.ProofURL != "" {
		ev.Entry = &DisputeEntry{UserID: r.MerchantID, Name: r.MerchantName, Message: r.Message, ProofURL: r.ProofURL,
			Type: EntryAdmin, CreatedAt: at}
	}
	var err error
	ev.Movement, ev.Records, err = st.Entry(s, at)
	return ev, err
}
