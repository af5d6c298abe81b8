package escrow

import (
	"strconv"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
)

// PartiallyRefunded records the merchant's return of Amount of an open
// standard escrow's held pool to the buyer's main balance. The escrow
// keeps its status; the fee is kept in full and collected when the escrow
// settles, and whatever settles it later divides only what is still held.
type PartiallyRefunded struct {
	Amount     money.Amount    `json:"amount"`
	RefundedBy string          `json:"refundedBy"` // the merchant
	Movement   ledger.Movement `json:"movement"`
	Records    []ledger.Record `json:"records"`
	At         time.Time       `json:"at"`
}

func (PartiallyRefunded) EventType() string { return "escrow.partially_refunded" }

func (e PartiallyRefunded) Ledger() ledger.Effect {
	return ledger.Effect{Movement: &e.Movement, Records: e.Records}
}

// Errors of partial refunds.
var (
	ErrRefundStandardOnly = domain.Invalidf("Only a standard escrow can be partially refunded")
	ErrRefundAmount       = domain.Invalidf("amount must be a positive amount")
)

// PartialRefund decides merchantID's partial refund of amount of an
// ONGOING or DISPUTED standard escrow to its buyer. The amount must leave
// a positive held pool: a refund of everything is a dispute's REFUNDED
// resolution, which settles the escrow.
func PartialRefund(s State, merchantID string, amount money.Amount, at time.Time) (PartiallyRefunded, error) {
	if !s.Exists() || s.BuyerID == "" || s.MerchantID != merchantID {
		return PartiallyRefunded{}, ErrActionNotAllowed
	}
	if s.Type() != StandardSettlement {
		return PartiallyRefunded{}, ErrRefundStandardOnly
	}
	if err := s.may(ActPartialRefund); err != nil {
		return PartiallyRefunded{}, err
	}
	if amount <= 0 {
		return PartiallyRefunded{}, ErrRefundAmount
	}
	if pool := s.HeldPool(); amount >= pool {
		return PartiallyRefunded{}, domain.Invalidf("amount must be less than the held amount of %s", pool)
	}
	st := s.partialRefund(amount)
	m, records, err := st.Entry(s, at)
	return PartiallyRefunded{Amount: amount, RefundedBy: merchantID, Movement: m, Records: records, At: at}, err
}

// partialRefund is the settlement of a partial refund: amount leaves the
// buyer's escrow balance for the buyer's main balance, recorded as a
// refund of its own (numbered: an escrow may be refunded in parts more
// than once); no fee is collected.
func (s State) partialRefund(amount money.Amount) Settlement {
	key := "partial-refund-" + strconv.Itoa(s.PartialRefunds+1)
	return Settlement{Holds: []Hold{{CustomerID: s.BuyerID, Amount: amount}},
		Payouts: []Payout{{CustomerID: s.BuyerID, Amount: amount, Type: ledger.Refund, Key: key}}}
}

// applyRefund folds the events of this file.
func applyRefund(s State, ev domain.Event) (State, bool) {
	e, ok := ev.(PartiallyRefunded)
	if !ok {
		return s, false
	}
	s.PartiallyRefunded += e.Amount
	s.PartialRefunds++
	s.UpdatedAt = e.At
	return s, true
}
