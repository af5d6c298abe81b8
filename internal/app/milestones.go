package app

import (
	"context"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/money"
)

// checkBeneficiaries names each milestone and checks that every
// beneficiary is a customer of the actor's merchant and environment.
func (s *Service) checkBeneficiaries(tx *Tx, a Actor, drafts []escrow.MilestoneDraft) error {
	for i := range drafts {
		drafts[i].ID = s.newRecordID()
		if cid := drafts[i].CustomerID; cid != "" {
			foreign := domain.Invalidf("milestones[%d].customerId is not a customer of this merchant", i)
			if _, err := loadOwnCustomer(tx, a, cid, foreign); err != nil {
				return err
			}
		}
	}
	return nil
}

// CreateMilestoneEscrow creates a milestone escrow sold by sellerID.
func (s *Service) CreateMilestoneEscrow(ctx context.Context, a Actor, sellerID string, d escrow.Draft, drafts []escrow.MilestoneDraft) (EscrowResult, error) {
	return s.createEscrow(ctx, a, sellerID, d.CategoryID, func(tx *Tx, id, token string, fees escrow.FeeTerms) (escrow.Created, error) {
		if err := s.checkBeneficiaries(tx, a, drafts); err != nil {
			return escrow.Created{}, err
		}
		return escrow.CreateMilestones(id, token, a.MerchantID, a.Environment, sellerID, fees, d, drafts, s.Engine.Now())
	})
}

// EditMilestoneEscrow applies the seller's edit of an unpaid milestone
// escrow; drafts, when not nil, replace the milestones.
func (s *Service) EditMilestoneEscrow(ctx context.Context, a Actor, seller, id string, p escrow.Patch, drafts []escrow.MilestoneDraft) (EscrowResult, error) {
	return s.changeEscrow(ctx, a, id, func(tx *Tx, e escrow.State) (domain.Event, error) {
		if p.CategoryID != nil {
			if err := s.checkCategory(tx, a, *p.CategoryID); err != nil {
				return nil, err
			}
		}
		if err := s.checkBeneficiaries(tx, a, drafts); err != nil {
			return nil, err
		}
		return escrow.EditMilestones(e, seller, p, drafts, s.Engine.Now())
	})
}

// ConvertToMilestones makes the seller's unpaid standard escrow a
// milestone escrow.
func (s *Service) ConvertToMilestones(ctx context.Context, a Actor, seller, id string, amount *money.Amount, drafts []escrow.MilestoneDraft) (EscrowResult, error) {
	return s.changeEscrow(ctx, a, id, func(tx *Tx, e escrow.State) (domain.Event, error) {
		if err := s.checkBeneficiaries(tx, a, drafts); err != nil {
			return nil, err
		}
		return escrow.ConvertToMilestones(e, seller, amount, drafts, s.Engine.Now())
	})
}

// ConfirmMilestone is the buyer's confirmation of one milestone: it is
// paid to its beneficiary exactly once, and the last completes the escrow.
func (s *Service) ConfirmMilestone(ctx context.Context, a Actor, buyerID, id, milestoneID string) (EscrowResult, error) {
	return s.changeEscrow(ctx, a, id, func(_ *Tx, e escrow.State) (domain.Event, error) {
		return escrow.ReleaseMilestone(e, buyerID, milestoneID, s.Engine.Now())
	})
}
