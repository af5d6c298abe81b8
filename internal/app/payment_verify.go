// Verifying a payment intent: executing it exactly once.

package app

import (
	"context"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/domain/wallet"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/gateway"
)

// Verify executes the acting customer's intent exactly once and returns its
// record: a deposit the gateway confirmed is credited, a transfer moves, a
// withdrawal is debited and paid out (or reversed when the payout fails).
// Verifying a settled intent returns the stored outcome; verifying a
// withdrawal interrupted after its debit resumes the payout.
func (s *Service) Verify(ctx context.Context, a Actor, customerID string, perms customer.Permissions, ref string) (ledger.Record, eventstore.Position, error) {
	st, err := s.Intent(ctx, a, customerID, ref)
	if err != nil {
		return ledger.Record{}, eventstore.Position{}, err
	}
	if st.Phase == payment.Done {
		return st.Record, eventstore.Position{}, nil
	}
	typ := st.Record.Type
	if (typ == ledger.Withdrawal || typ == ledger.WalletTransfer) && !perms.CanWithdraw {
		return ledger.Record{}, eventstore.Position{}, ErrAccessDenied
	}
	set := s.gateways(a.Environment)
	if typ == ledger.Withdrawal && set.Payouts == nil {
		// Refused before anything moves or the lease is taken: a debit
		// nobody can pay out, or a lease held without asking, helps no one.
		return ledger.Record{}, eventstore.Position{}, ErrPaymentsNotConfigured
	}
	if st.ChargeReference != "" || st.DepositAccount != nil {
		// Collected through the provider: a deposit is settled by the
		// transfer into its account (pending until then); a card, bank or
		// USSD payment by its charge, asked about now.
		if (typ == ledger.EscrowPayment) && !perms.CanBuy {
			return ledger.Record{}, eventstore.Position{}, ErrAccessDenied
		}
		st, pos, err := s.settleIntentCharge(ctx, a, st)
		return st.Record, pos, err
	}
	stream := payment.StreamID(a.MerchantID, a.Environment, ref)
	holder := s.newID() // this verify, as a payout lease holder
	var pos eventstore.Position
	if st.Phase == payment.Staged && typ == ledger.EscrowPayment {
		if !perms.CanBuy {
			return ledger.Record{}, pos, ErrAccessDenied
		}
		res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
			p, err := Read(tx, PaymentKind, stream)
			if err != nil {
				return err
			}
			if p.Phase != payment.Staged {
				st = p
				return ErrNothingToDo
			}
			st, _, err = s.fundEscrows(tx, a, stream, p)
			return err
		})
		return st.Record, res.Position, err
	}
	if st.Phase == payment.Staged {
		var deposit payment.Outcome
		if typ == ledger.Deposit {
			if set.Collection == nil {
				return ledger.Record{}, pos, ErrPaymentsNotConfigured
			}
			if deposit, err = set.Collection.Confirm(ctx, st.Record); err != nil {
				return ledger.Record{}, pos, err
			}
		}
		receiverID := s.newRecordID()
		// Deposits of the built-in test gateway have no money behind
		// them: their credits are bounded a day.
		_, testDeposit := set.Collection.(gateway.TestCollection)
		rules := wallet.Posting{TestDeposit: typ == ledger.Deposit && testDeposit}
		res, err := s.advanceIntentUnder(ctx, a, stream, &st, rules, func(tx *Tx, p payment.State) (domain.Event, error) {
			if bc := p.Record.BlockchainDetails; bc != nil && p.Phase == payment.Staged {
				// The address may have been removed since staging; the append
				// proves it is still whitelisted when the money leaves.
				wl, err := Guard(tx, WhitelistKind, customerID)
				if err != nil {
					return nil, err
				}
				if !wl.Has(bc.ToAddress) {
					return nil, domain.Invalidf("Address is not whitelisted")
				}
			}
			if wd := p.Record.WalletDetails; wd != nil && p.Phase == payment.Staged {
				// The receiver may have been blocked since staging; the
				// append proves they are not when the money moves.
				to, err := Guard(tx, CustomerKind, wd.CustomerID)
				if err != nil {
					return nil, err
				}
				if to.Blocked {
					return nil, ErrReceiverBlocked
				}
			}
			ev, err := payment.Execute(p, deposit, receiverID, "WT-"+receiverID, s.Engine.Now())
			if started, ok := ev.(payment.PayoutStarted); ok {
				// The debit takes the payout lease with it, and links the
				// provider's reference to the withdrawal before anything
				// is sent, so the provider's events about it find it.
				now, err := s.leaseNow(tx.ctx)
				if err != nil {
					return nil, err
				}
				ev = started.Leased(holder, now)
				linkPayout(tx, a, set.Payouts, started.Record)
			}
			return ev, err
		})
		if err != nil {
			return ledger.Record{}, pos, err
		}
		pos = res.Position
	}
	p, err := s.payOut(ctx, a, stream, &st, holder, set, nil)
	if p != (eventstore.Position{}) {
		pos = p
	}
	return st.Record, pos, err
}

// advanceIntent runs one step of an intent's life: decide returns the next
// event (nil when another request already took the step), whose money is
// posted to the wallets in the same append. st is left at the intent as it
// now stands.
func (s *Service) advanceIntent(ctx context.Context, a Actor, stream string, st *payment.State, decide func(*Tx, payment.State) (domain.Event, error)) (eventstore.AppendResult, error) {
	return s.advanceIntentUnder(ctx, a, stream, st, wallet.Posting{}, decide)
}

// advanceIntentUnder is advanceIntent with the wallet rules of rules on
// the step's credits.
func (s *Service) advanceIntentUnder(ctx context.Context, a Actor, stream string, st *payment.State, rules wallet.Posting, decide func(*Tx, payment.State) (domain.Event, error)) (eventstore.AppendResult, error) {
	return s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		p, err := Read(tx, PaymentKind, stream)
		if err != nil {
			return err
		}
		ev, err := decide(tx, p)
		if err != nil {
			return err
		}
		if ev == nil {
			*st = p
			return ErrNothingToDo
		}
		if err := recordEntryUnder(s, tx, PaymentKind, stream, ev, rules); err != nil {
			return err
		}
		*st = payment.Apply(p, ev)
		return nil
	})
}

// ErrReceiverBlocked refuses a wallet transfer to a customer blocked since
// it was staged (as staging refuses one to a blocked customer).
var ErrReceiverBlocked = domain.Invalidf("The recipient's account is disabled")
