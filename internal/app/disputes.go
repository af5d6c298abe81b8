package app

import (
	"context"
	"strings"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
)

// SubmitDispute records a party's dispute entry on escrow id: the buyer's
// opens the dispute, the seller's answers it.
func (s *Service) SubmitDispute(ctx context.Context, a Actor, customerID, id, message, proofURL string) (EscrowResult, error) {
	return s.changeEscrow(ctx, a, id, func(tx *Tx, e escrow.State) (domain.Event, error) {
		var name string
		if customerID != "" {
			c, err := Read(tx, CustomerKind, customerID)
			if err != nil {
				return nil, err
			}
			name = strings.TrimSpace(c.Firstname + " " + c.Lastname)
		}
		return escrow.SubmitDispute(e, escrow.Submission{CustomerID: customerID, Name: name, Message: message, ProofURL: proofURL},
			s.Engine.Now())
	})
}

// ResolveDispute is the merchant's ruling on a disputed escrow: it settles
// what the escrow holds, exactly once (the escrow's expected revision
// makes a racing confirm, claim or second ruling lose and re-decide).
func (s *Service) ResolveDispute(ctx context.Context, a Actor, id string, r escrow.Resolution) (EscrowResult, error) {
	return s.changeEscrow(ctx, a, id, func(tx *Tx, e escrow.State) (domain.Event, error) {
		m, err := Read(tx, MerchantKind, a.MerchantID)
		if err != nil {
			return nil, err
		}
		r.MerchantID, r.MerchantName = a.MerchantID, m.Name
		return escrow.Resolve(e, r, s.Engine.Now())
	})
}
