// Posting a ledger entry's movement to the wallets it touches.

package app

import (
	"errors"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/wallet"
)

// recordEntry records ev on aggregate id of kind k and, when ev is a ledger
// entry, posts its movement to the wallets it touches (postEffect): an
// event that moves money never goes into an append without its postings.
func recordEntry[S any](s *Service, tx *Tx, k Kind[S], id string, ev domain.Event) error {
	return recordEntryUnder(s, tx, k, id, ev, wallet.Posting{})
}

// recordEntryUnder is recordEntry with the wallet rules of rules (TopUp,
// TestDeposit) applied to the credits.
func recordEntryUnder[S any](s *Service, tx *Tx, k Kind[S], id string, ev domain.Event, rules wallet.Posting) error {
	if entry, ok := ev.(ledger.Entry); ok {
		if err := s.postEffect(tx, entry, rules); err != nil {
			return err
		}
	}
	Record(tx, k, id, ev)
	return nil
}

// refusedOnMovedWallet marks the attempt to be decided again when a
// wallet check (postEffect) refused a movement the decision allowed: the
// decision rested on a balance, or on an escrow holding it, that another
// command has moved since this one read it (a vault's settlement racing
// another; a participant's payment between two reads of their wallet).
// Only a decision on state read afresh may refuse.
func refusedOnMovedWallet(tx *Tx, err error) error {
	if errors.Is(err, wallet.ErrInsufficient) {
		tx.stale = true
	}
	return err
}

// postEffect mirrors an entry's movement into every customer wallet it
// touches, in the same append: a debit is checked against the wallet's
// revision-proven balance; a pure credit is appended unchecked, so payments
// into a popular wallet never conflict with each other, unless rules (a
// top-up, a test deposit) give it a rule on the wallet's state.
func (s *Service) postEffect(tx *Tx, e ledger.Entry, rules wallet.Posting) error {
	eff := e.Ledger()
	if eff.Movement == nil {
		return nil
	}
	m := *eff.Movement
	if err := m.Validate(); err != nil {
		return err
	}
	p := wallet.Posting{TopUp: rules.TopUp, TestDeposit: rules.TestDeposit, At: s.Engine.Now()}
	checked := rules.TopUp || rules.TestDeposit
	if len(eff.Records) > 0 {
		p.TransactionID, p.Reference = eff.Records[0].ID, eff.Records[0].Reference
	}
	d := m.Deltas()
	for _, cid := range m.Customers() {
		// A top-up or a test deposit is a credit with a rule (once a day,
		// so much a day) on the wallet's state, so it is checked like a
		// debit.
		credit := d[ledger.CustomerMain(cid)] >= 0 && d[ledger.CustomerEscrow(cid)] >= 0 && !checked
		var w wallet.State
		if !credit {
			var err error
			if w, err = Read(tx, WalletKind, cid); err != nil {
				return err
			}
		}
		posted, err := wallet.Post(w, cid, m, postingOf(p, eff.Records, cid))
		if err != nil {
			return err
		}
		switch {
		case posted == nil:
		case credit:
			Append(tx, WalletKind, cid, *posted)
		default:
			Record(tx, WalletKind, cid, *posted)
		}
	}
	return nil
}

// postingOf is p for customerID's wallet: named after the customer's own
// record when the entry writes one (each participant's stake of a vault),
// else after the entry's first record.
func postingOf(p wallet.Posting, records []ledger.Record, customerID string) wallet.Posting {
	for _, r := range records {
		if r.CustomerID == customerID {
			p.TransactionID, p.Reference = r.ID, r.Reference
			break
		}
	}
	return p
}
