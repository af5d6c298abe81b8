package app

import (
	"context"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/money"
)

// CreateVault creates a funded vault of the actor's merchant: every stake
// moves from its owner's main balance to their escrow balance in the one
// append that creates the vault. The append expects each participant's
// wallet at the revision whose balance covered the stake, so a vault
// racing a participant's withdrawal either locks every stake or, on a
// conflict, decides again on the new balances: never a partial vault,
// never an overdraft. The event store locks streams in one order, so
// vaults and payments over the same wallets cannot deadlock, and a
// conflict means another command committed (no livelock); a vault that
// keeps losing gives up with ErrContended having moved nothing.
func (s *Service) CreateVault(ctx context.Context, a Actor, d escrow.VaultDraft) (EscrowResult, error) {
	if err := d.Check(); err != nil { // before reading any participant
		return EscrowResult{}, err
	}
	id, token := s.newID(), NewPaymentToken()
	var out EscrowResult
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		m, err := ReadLatest(tx, MerchantKind, a.MerchantID) // fees: an operator's change counts at once
		if err != nil {
			return err
		}
		if err := s.checkCategory(tx, a, d.CategoryID); err != nil {
			return err
		}
		available := make(map[string]money.Amount, len(d.Participants))
		for _, p := range d.Participants {
			c, err := loadOwnCustomer(tx, a, p.CustomerID, domain.Invalidf("Participant %s is not a customer of this merchant", p.CustomerID))
			if err != nil {
				return err
			}
			if c.Blocked {
				return domain.Invalidf("The account of participant %s is disabled", p.CustomerID)
			}
			w, err := Read(tx, WalletKind, p.CustomerID)
			if err != nil {
				return err
			}
			available[p.CustomerID] = w.Main
		}
		ev, err := escrow.CreateVault(id, token, a.MerchantID, a.Environment,
			escrow.FeeTerms{EscrowFeeBps: m.Fees.VaultFeeBps, CommissionBps: m.Fees.VaultCommissionBps}, d, available, s.Engine.Now())
		if err != nil {
			return err
		}
		if err := refusedOnMovedWallet(tx, recordEntry(s, tx, EscrowKind, id, ev)); err != nil {
			return err
		}
		out.Escrow = escrow.Apply(escrow.State{}, ev)
		return nil
	})
	out.Position = res.Position
	return out, err
}

// DeclareVaultWinner pays the pot less the fee to winnerID and closes the
// vault COMPLETED, exactly once: the escrow's expected revision makes a
// racing winner or cancel lose and find the vault settled.
func (s *Service) DeclareVaultWinner(ctx context.Context, a Actor, id, winnerID string) (EscrowResult, error) {
	return s.changeEscrow(ctx, a, id, func(_ *Tx, e escrow.State) (domain.Event, error) {
		return escrow.DeclareWinner(e, winnerID, s.Engine.Now())
	})
}

// CancelVault returns each stake less its fee share and closes the vault
// REFUNDED, exactly once.
func (s *Service) CancelVault(ctx context.Context, a Actor, id string) (EscrowResult, error) {
	return s.changeEscrow(ctx, a, id, func(_ *Tx, e escrow.State) (domain.Event, error) {
		return escrow.CancelVault(e, a.MerchantID, s.Engine.Now())
	})
}
