// Withdrawals the payout resumer cannot finish, and an operator's
// resolution of one: retry it, or return its money.

package app

import (
	"context"
	"errors"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/eventstore"
)

// HeldPayout is a withdrawal still paying out a while after its debit,
// and why (payment.WhyHeld).
type HeldPayout struct {
	PayoutRef
	Record ledger.Record
	Hold   payment.Hold
}

// HeldPayouts lists the withdrawals find lists (the PayoutResumer's Find)
// debited before before that are still paying out, oldest first, with why
// each is: those whose lease's holder is asking the provider now are left
// out. Each is read from its stream, so the answer is as of now, whatever
// the read model has seen.
func (s *Service) HeldPayouts(ctx context.Context, find func(context.Context, PayoutRef, time.Time, int) ([]PayoutRef, error), before time.Time) ([]HeldPayout, error) {
	const batch = 100
	var out []HeldPayout
	for after := (PayoutRef{}); ; {
		due, err := find(ctx, after, before, batch)
		if err != nil {
			return out, err
		}
		for _, p := range due {
			h, held, err := s.heldPayout(ctx, p)
			if err != nil {
				return out, err
			}
			if held {
				out = append(out, h)
			}
		}
		if len(due) < batch {
			return out, nil
		}
		after = due[len(due)-1]
	}
}

func (s *Service) heldPayout(ctx context.Context, p PayoutRef) (HeldPayout, bool, error) {
	st, _, err := Load(ctx, s.Engine, PaymentKind, payment.StreamID(p.MerchantID, p.Environment, p.Reference))
	if err != nil {
		return HeldPayout{}, false, err
	}
	c, _, err := Load(ctx, s.Engine, CustomerKind, st.Record.CustomerID)
	if err != nil {
		return HeldPayout{}, false, err
	}
	now, err := s.leaseNow(ctx)
	if err != nil {
		return HeldPayout{}, false, err
	}
	hold, held := payment.WhyHeld(st, payment.Payer{Blocked: c.Blocked, CanWithdraw: c.Permissions.CanWithdraw},
		s.gateways(p.Environment).Payouts != nil, now)
	return HeldPayout{PayoutRef: p, Record: st.Record, Hold: hold}, held, nil
}

// RetryPayout is an operator's retry of a withdrawal paying out: one the
// provider accepted is asked where it stands now (whatever its poll
// delay); any other is sent now under the payout lease, whatever holds the
// resumer back (the operator has decided it is to be paid), unless a
// holder's lease runs (ErrPayoutInProgress). Its events' actor is the
// operator. The record is the withdrawal as it now stands; pos is the
// position of the last event recorded (zero: none).
func (s *Service) RetryPayout(ctx context.Context, merchantID string, env domain.Environment, ref string) (rec ledger.Record, pos eventstore.Position, err error) {
	a := Actor{MerchantID: merchantID, Environment: env}
	stream := payment.StreamID(merchantID, env, ref)
	st, _, err := Load(ctx, s.Engine, PaymentKind, stream)
	if err != nil {
		return st.Record, pos, err
	}
	if err := payment.Resolvable(st); err != nil {
		return st.Record, pos, err
	}
	set := s.gateways(env)
	if set.Payouts == nil {
		return st.Record, pos, ErrPaymentsNotConfigured
	}
	if st.Accepted {
		pos, err = s.askPayoutStatusAt(ctx, a, stream, &st)
		return st.Record, pos, err
	}
	pos, err = s.payOut(ctx, a, stream, &st, s.newID(), set, nil)
	return st.Record, pos, err
}

// ReturnPayout is an operator's return of a held withdrawal's money, as
// payment.ReturnPayout decides on what the provider answers when asked
// now: returned once (the whole debit, fee included, back to main; status
// failed) when the provider has no record of the payout; settled as the
// provider says when it has an outcome; refused while the provider has it
// pending, or when it cannot be asked (ErrPayoutUnanswered: a payout
// perhaps made must not be returned as well). Its event's actor is the
// operator.
func (s *Service) ReturnPayout(ctx context.Context, merchantID string, env domain.Environment, ref string) (rec ledger.Record, pos eventstore.Position, err error) {
	a := Actor{MerchantID: merchantID, Environment: env}
	stream := payment.StreamID(merchantID, env, ref)
	st, _, err := Load(ctx, s.Engine, PaymentKind, stream)
	if err != nil {
		return st.Record, pos, err
	}
	if err := payment.Resolvable(st); err != nil {
		return st.Record, pos, err
	}
	payouts := s.gateways(env).Payouts
	if payouts == nil {
		return st.Record, pos, ErrPaymentsNotConfigured
	}
	call, cancel := context.WithTimeout(ctx, payment.PayoutCallTimeout)
	ans, err := payouts.Status(call, st.Record)
	cancel()
	if err != nil {
		return st.Record, pos, errors.Join(ErrPayoutUnanswered, err)
	}
	res, err := s.advanceIntent(ctx, a, stream, &st, func(tx *Tx, p payment.State) (domain.Event, error) {
		now, err := s.leaseNow(tx.ctx)
		if err != nil {
			return nil, err
		}
		return payment.ReturnPayout(p, ans, now)
	})
	return st.Record, res.Position, err
}
