package app

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"

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
// never an overdraft. The event store locks streams in one sorted order,
// so vaults and payments over the same wallets cannot deadlock; a
// conflict means another command committed; and vaults sharing wallets
// queue for them in this process (walletLocks) rather than starve each
// other of them.
func (s *Service) CreateVault(ctx context.Context, a Actor, d escrow.VaultDraft) (EscrowResult, error) {
	if err := d.Check(); err != nil { // before reading any participant
		return EscrowResult{}, err
	}
	ids := make([]string, len(d.Participants))
	for i, p := range d.Participants {
		ids[i] = p.CustomerID
	}
	defer s.vaultLocks.lock(ids)()
	id, token := s.newRecordID(), s.IDs.PaymentToken()
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
	defer s.lockParticipants(ctx, id)()
	return s.changeEscrow(ctx, a, id, func(_ *Tx, e escrow.State) (domain.Event, error) {
		return escrow.DeclareWinner(e, winnerID, s.Engine.Now())
	})
}

// CancelVault returns each stake less its fee share and closes the vault
// REFUNDED, exactly once.
func (s *Service) CancelVault(ctx context.Context, a Actor, id string) (EscrowResult, error) {
	defer s.lockParticipants(ctx, id)()
	return s.changeEscrow(ctx, a, id, func(_ *Tx, e escrow.State) (domain.Event, error) {
		return escrow.CancelVault(e, a.MerchantID, s.Engine.Now())
	})
}

// lockParticipants takes the wallet locks of vault id's participants (a
// vault's participants never change, so the cached vault names them; a
// command on anything else locks nothing and is refused by its decision).
func (s *Service) lockParticipants(ctx context.Context, id string) (unlock func()) {
	v, err := Peek(ctx, s.Engine, EscrowKind, id)
	if err != nil {
		return func() {}
	}
	ids := make([]string, len(v.Participants))
	for i, p := range v.Participants {
		ids[i] = p.CustomerID
	}
	return s.vaultLocks.lock(ids)
}

// walletLocks queue, within one process, the commands that write the
// wallets of many customers at once (a vault's creation, its winner, its
// cancel). Without them, vaults sharing a wallet all read it, all but one
// lose the append and decide again, and a vault of ten wallets keeps
// losing to whichever of the others committed meanwhile until it gives up
// (ErrContended): optimistic retries starve a command of many streams. A
// vault holding its wallets' locks, taken in one order (so never in a
// cycle), waits its turn instead. The append's expected revisions still
// decide: a payment or another process, which take no lock here, only
// cost a retry. Stripes bound the memory; two wallets on one stripe only
// queue a little more.
type walletLocks struct {
	seed    maphash.Seed
	once    sync.Once
	stripes [256]sync.Mutex
}

// lock locks the stripes of customerIDs in ascending order and returns
// the function that unlocks them.
func (l *walletLocks) lock(customerIDs []string) (unlock func()) {
	l.once.Do(func() { l.seed = maphash.MakeSeed() })
	idx := make([]int, 0, len(customerIDs))
	for _, id := range customerIDs {
		idx = append(idx, int(maphash.String(l.seed, id)%uint64(len(l.stripes))))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		l.stripes[i].Lock()
	}
	return func() {
		for _, i := range idx {
			l.stripes[i].Unlock()
		}
	}
}
