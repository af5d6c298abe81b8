package app

import (
	"strings"

	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/ledger"
)

// escrowSummary describes a funded escrow for its payment's record
// : the beneficiary is the seller, or the merchant
// selling as itself. The seller's stream is read, not checked: a name
// changed meanwhile does not make the payment wrong.
func (s *Service) escrowSummary(tx *Tx, a Actor, e escrow.State) (ledger.EscrowSummary, error) {
	amount, fee := e.Terms.Amount, e.Fee
	sum := ledger.EscrowSummary{PaymentToken: e.PaymentToken, Purpose: e.Terms.Purpose, Amount: &amount, Fee: &fee}
	if e.SellerID == "" {
		m, err := Read(tx, MerchantKind, a.MerchantID)
		if err != nil {
			return sum, err
		}
		sum.Beneficiary = &ledger.Beneficiary{Name: m.Name}
		return sum, nil
	}
	c, err := Read(tx, CustomerKind, e.SellerID)
	if err != nil {
		return sum, err
	}
	sum.Beneficiary = &ledger.Beneficiary{Name: strings.TrimSpace(c.Firstname + " " + c.Lastname), Phone: c.Phone}
	return sum, nil
}
