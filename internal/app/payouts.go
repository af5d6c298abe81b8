// Paying a withdrawal out through the provider, under the payout lease, and
// resuming one that was interrupted.

package app

import (
	"context"
	"errors"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/gateway"
)

// ResumePayout moves on a withdrawal found paying out, as the
// PayoutResumer does for every such withdrawal. One not yet accepted by
// the provider (its verify was interrupted after the debit, or the
// provider did not answer) is sent again: it takes the payout lease when
// nobody holds it, asks the provider and records the answer. One accepted
// and waiting for its outcome longer than the service's poll delay
// (Service.PayoutPollAfter) is polled (PollPayout). It does nothing to an
// intent that is not paying out, and answers ErrPayoutInProgress while
// another holder's lease runs. agent names the background job in the
// events' metadata. settled says the withdrawal was paying out and is now
// over (paid out, failed or reversed).
func (s *Service) ResumePayout(ctx context.Context, merchantID string, env domain.Environment, ref, agent string) (rec ledger.Record, settled bool, err error) {
	a := Actor{MerchantID: merchantID, Environment: env, Agent: agent}
	stream := payment.StreamID(merchantID, env, ref)
	st, _, err := Load(ctx, s.Engine, PaymentKind, stream)
	if err != nil || st.Phase != payment.PayingOut {
		return st.Record, false, err
	}
	if st.AwaitingOutcome() {
		// Sent and accepted: its outcome comes by the provider's event or
		// a poll once due.
		return s.PollPayout(ctx, merchantID, env, ref, agent, s.payoutPollAfter())
	}
	set := s.gateways(env)
	if set.Payouts == nil {
		return st.Record, false, ErrPaymentsNotConfigured
	}
	// Verify resumes a payout only for a customer who may still withdraw
	// (auth refuses a blocked one, Verify one without the permission); the
	// resumer, acting without the customer, holds the money as they would.
	// It decides so in the append that takes the lease, which guards the
	// customer's stream: a block committed before it is seen, and one
	// racing it waits for it or makes it decide again.
	mayWithdraw := func(tx *Tx, p payment.State) error {
		c, err := Guard(tx, CustomerKind, p.Record.CustomerID)
		if err != nil {
			return err
		}
		if c.Blocked || !c.Permissions.CanWithdraw {
			return ErrPayoutHeld
		}
		return nil
	}
	_, err = s.payOut(ctx, a, stream, &st, s.newID(), set, mayWithdraw)
	return st.Record, err == nil && st.Phase == payment.Done, err
}

// ErrPayoutHeld: the resumer leaves a withdrawal paying out whose customer
// is blocked or may no longer withdraw; it is resumed once they may.
var ErrPayoutHeld = errors.New("app: payout held: the customer is blocked or may not withdraw")

// payOut runs a withdrawal's send step for holder, a verify or the
// resumer: st is the intent as read, and is left as it now stands. It
// takes the lease unless holder already has it (a verify that just
// debited), asks the provider to send the payout within the lease's call
// deadline, and records the answer (accepted, final, or none: the lease
// is given up). A payout the provider has accepted is not sent again: its
// outcome comes by SettlePayout. mayTake, when set, is asked within the
// append that takes the lease, for a withdrawal still to be sent; its
// error refuses the lease.
func (s *Service) payOut(ctx context.Context, a Actor, stream string, st *payment.State, holder string, set gateway.Set, mayTake func(*Tx, payment.State) error) (eventstore.Position, error) {
	var pos eventstore.Position
	if st.AwaitingSend() && st.LeaseHolder != holder {
		// Found debited and not sent (an interrupted verify, or one still
		// asking the provider): take the lease, unless another verify
		// holds it or has had the payout accepted meanwhile (the append's
		// expected revision settles a race for it).
		res, err := s.advanceIntent(ctx, a, stream, st, func(tx *Tx, p payment.State) (domain.Event, error) {
			now, err := s.leaseNow(tx.ctx)
			if err != nil {
				return nil, err
			}
			ev, err := payment.LeasePayout(p, holder, now)
			if ev != nil && err == nil && mayTake != nil {
				err = mayTake(tx, p)
			}
			return ev, err
		})
		if err != nil {
			return pos, err
		}
		if res.Position != (eventstore.Position{}) {
			pos = res.Position
		}
	}
	if !st.AwaitingSend() {
		return pos, nil
	}
	// This verify holds the lease; its call ends by the lease's call
	// deadline, and is not made at all once that has passed. From here the
	// step belongs to the lease, not to the client's connection: a client
	// hanging up must neither cut the provider's call short nor keep its
	// answer from being recorded (a payout made but not recorded would be
	// sent again once the lease ran out).
	ctx = context.WithoutCancel(ctx)
	ans := payment.PayoutAnswer{Status: payment.ProviderUnknown}
	now, err := s.leaseNow(ctx)
	if err != nil {
		// Without the time, the call's deadline is unknown: nothing is
		// sent, and the lease is given up below if the clock answers then.
		now = st.PayoutCallDeadline()
	}
	if left := st.PayoutCallDeadline().Sub(now); left > 0 {
		call, cancel := context.WithTimeout(ctx, left)
		// A destination the provider does not know yet is registered
		// first; not hearing back leaves the payout unsent and unknown.
		recipient, err := s.payoutRecipient(call, a, set.Recipients, st.Record)
		if err == nil {
			var got payment.PayoutAnswer
			got, err = set.Payouts.Send(call, st.Record, recipient)
			if err == nil && (got.Final() || got.Status == payment.ProviderPending) {
				ans = got
			}
		}
		cancel()
	}
	ctx, cancel := context.WithTimeout(ctx, payoutRecordTimeout)
	defer cancel()
	// No answer gives the lease up (AnswerSend): the debit stands, the
	// intent stays pending, and verifying again sends again at once (were
	// the release lost, the lease would run out).
	res, err := s.advanceIntent(ctx, a, stream, st, func(tx *Tx, p payment.State) (domain.Event, error) {
		now, err := s.leaseNow(tx.ctx)
		if err != nil {
			return nil, err
		}
		return payment.AnswerSend(p, holder, ans, now), nil
	})
	if ans.Status == payment.ProviderUnknown {
		if err != nil {
			return pos, errors.Join(ErrPayoutUnanswered, err)
		}
		return pos, ErrPayoutUnanswered
	}
	if err != nil {
		return pos, err
	}
	if res.Position != (eventstore.Position{}) {
		pos = res.Position
	}
	if st.AwaitingSend() && st.LeaseHolder != holder {
		// The lease ran out and another holder took it before this answer
		// was recorded: that one asks again and records.
		return pos, payment.ErrPayoutInProgress
	}
	return pos, nil
}

// PollPayout asks the provider where an accepted payout stands once it has
// waited after for its outcome (the provider's event did not come), and
// records the answer. settled says the payout is now over.
func (s *Service) PollPayout(ctx context.Context, merchantID string, env domain.Environment, ref, agent string, after time.Duration) (rec ledger.Record, settled bool, err error) {
	a := Actor{MerchantID: merchantID, Environment: env, Agent: agent}
	stream := payment.StreamID(merchantID, env, ref)
	st, _, err := Load(ctx, s.Engine, PaymentKind, stream)
	if err != nil {
		return st.Record, false, err
	}
	now, err := s.leaseNow(ctx)
	if err != nil || !st.PollDue(after, now) {
		return st.Record, false, err
	}
	err = s.askPayoutStatus(ctx, a, stream, &st)
	return st.Record, err == nil && st.Phase == payment.Done, err
}

// SettleProviderPayout brings the payout the provider names providerRef
// to where the provider says it stands, whatever its wait: the provider's
// event about it (which the caller has authenticated but not believed:
// the answer acted on is the provider's, asked now) or reconciliation.
// ErrUnknownPayout: no withdrawal of env is paid by that reference.
func (s *Service) SettleProviderPayout(ctx context.Context, env domain.Environment, providerRef, agent string) (ledger.Record, error) {
	link, _, err := Load(ctx, s.Engine, PayoutLinkKind, payment.PayoutLinkID(env, providerRef))
	if err != nil {
		return ledger.Record{}, err
	}
	if !link.Exists() {
		return ledger.Record{}, ErrUnknownPayout
	}
	a := Actor{MerchantID: link.MerchantID, Environment: env, Agent: agent}
	stream := payment.StreamID(link.MerchantID, env, link.Reference)
	st, _, err := Load(ctx, s.Engine, PaymentKind, stream)
	if err != nil {
		return ledger.Record{}, err
	}
	err = s.askPayoutStatus(ctx, a, stream, &st)
	return st.Record, err
}

// ErrUnknownPayout: the provider's reference names no withdrawal here.
var ErrUnknownPayout = errors.New("app: no withdrawal is paid out by that provider reference")

// askPayoutStatus asks the provider where st's payout stands and records
// what payment.SettlePayout decides of the answer; st is left as it now
// stands. An unanswered call is ErrPayoutUnanswered, and decides nothing.
func (s *Service) askPayoutStatus(ctx context.Context, a Actor, stream string, st *payment.State) error {
	_, err := s.askPayoutStatusAt(ctx, a, stream, st)
	return err
}

// askPayoutStatusAt is askPayoutStatus, answering the position of the
// event it recorded (zero: none).
func (s *Service) askPayoutStatusAt(ctx context.Context, a Actor, stream string, st *payment.State) (eventstore.Position, error) {
	if st.Record.Type != ledger.Withdrawal || st.Phase == payment.Staged || !st.Exists() {
		return eventstore.Position{}, nil
	}
	if st.Phase == payment.Done && st.Record.Status != ledger.Success {
		// Returned already: no answer can move anything (SettlePayout),
		// so the provider is not asked.
		return eventstore.Position{}, nil
	}
	payouts := s.gateways(a.Environment).Payouts
	if payouts == nil {
		return eventstore.Position{}, ErrPaymentsNotConfigured
	}
	call, cancel := context.WithTimeout(ctx, payment.PayoutCallTimeout)
	ans, err := payouts.Status(call, st.Record)
	cancel()
	if err != nil || ans.Status == payment.ProviderUnknown {
		return eventstore.Position{}, errors.Join(ErrPayoutUnanswered, err)
	}
	res, err := s.advanceIntent(ctx, a, stream, st, func(tx *Tx, p payment.State) (domain.Event, error) {
		now, err := s.leaseNow(tx.ctx)
		if err != nil {
			return nil, err
		}
		return payment.SettlePayout(p, ans, now)
	})
	return res.Position, err
}

// payoutRecipient is the provider's id of a bank withdrawal's destination:
// the one kept for the account, or else one registered now and kept (the
// first kept stands if two payouts race to register one account). ""
// when the rail needs none.
func (s *Service) payoutRecipient(ctx context.Context, a Actor, recipients gateway.Recipients, w ledger.Record) (string, error) {
	to := w.WithdrawalDetails
	if recipients == nil || to == nil {
		return "", nil
	}
	index, err := s.blindIndex(ctx, RecipientPurpose, payment.RecipientKey(to.BankCode, to.AccountNumber))
	if err != nil {
		return "", err
	}
	id := payment.RecipientID(a.Environment, index)
	kept, err := Peek(ctx, s.Engine, RecipientKind, id)
	if err != nil || kept.Code != "" {
		return kept.Code, err
	}
	code, err := recipients.Recipient(ctx, *to)
	if err != nil {
		return "", err
	}
	if code == "" {
		return "", errors.New("app: the provider answered no recipient id")
	}
	_, err = s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		r, err := Read(tx, RecipientKind, id)
		if err != nil {
			return err
		}
		if r.Code != "" {
			code = r.Code
			return ErrNothingToDo
		}
		Record(tx, RecipientKind, id, payment.RecipientRegistered{BankCode: to.BankCode, AccountNumber: to.AccountNumber, Code: code})
		return nil
	})
	return code, err
}

// linkPayout links the provider's reference of withdrawal's payout to it,
// in the append that debits it. Appending unchecked is safe: a debit
// happens once, and the first link of a reference stands.
func linkPayout(tx *Tx, a Actor, payouts gateway.Payouts, withdrawal ledger.Record) {
	ref := payouts.Reference(withdrawal)
	Append(tx, PayoutLinkKind, payment.PayoutLinkID(a.Environment, ref), payment.PayoutLinked{
		PayoutLink:        payment.PayoutLink{MerchantID: a.MerchantID, Environment: a.Environment, Reference: withdrawal.Reference},
		ProviderReference: ref,
	})
}

// payoutRecordTimeout bounds recording a payout's answer (or giving its
// lease up) once the client's own context no longer does.
const payoutRecordTimeout = 15 * time.Second
