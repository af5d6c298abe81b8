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

// ResumePayout finishes a withdrawal found paying out whose verify was
// interrupted after the debit (or whose provider did not answer), as the
// PayoutResumer does for every such withdrawal: it takes the payout lease
// when nobody holds it, asks the provider and records the answer. It does
// nothing to an intent that is not paying out, and answers
// ErrPayoutInProgress while another holder's lease runs. agent names the
// background job in the events' metadata. settled says the withdrawal was
// paying out and is now over (paid out or reversed).
func (s *Service) ResumePayout(ctx context.Context, merchantID string, env domain.Environment, ref, agent string) (rec ledger.Record, settled bool, err error) {
	a := Actor{MerchantID: merchantID, Environment: env, Agent: agent}
	stream := payment.StreamID(merchantID, env, ref)
	st, _, err := Load(ctx, s.Engine, PaymentKind, stream)
	if err != nil || st.Phase != payment.PayingOut {
		return st.Record, false, err
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
	_, err = s.payOut(ctx, a, stream, &st, s.newID(), set.Payouts, mayWithdraw)
	return st.Record, err == nil && st.Phase == payment.Done, err
}

// ErrPayoutHeld: the resumer leaves a withdrawal paying out whose customer
// is blocked or may no longer withdraw; it is resumed once they may.
var ErrPayoutHeld = errors.New("app: payout held: the customer is blocked or may not withdraw")

// payOut runs a withdrawal's payout step for holder, a verify or the
// resumer: st is the intent as read, and is left as it now stands. It
// takes the lease unless holder already has it (a verify that just
// debited), asks the provider within the lease's call deadline, and records
// the answer, or gives the lease up when there is none. mayTake, when
// set, is asked within the append that takes the lease, for a withdrawal
// still paying out; its error refuses the lease.
func (s *Service) payOut(ctx context.Context, a Actor, stream string, st *payment.State, holder string, payouts gateway.Payouts, mayTake func(*Tx, payment.State) error) (eventstore.Position, error) {
	var pos eventstore.Position
	if st.Phase == payment.PayingOut && st.LeaseHolder != holder {
		// Found paying out (an interrupted verify, or one still asking the
		// provider): take the lease, unless another verify holds it or has
		// finished the payout meanwhile (the append's expected revision
		// settles a race for it).
		res, err := s.advanceIntent(ctx, a, stream, st, func(tx *Tx, p payment.State) (domain.Event, error) {
			ev, err := payment.LeasePayout(p, holder, s.Engine.Now())
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
	if st.Phase == payment.PayingOut {
		// This verify holds the lease; its call ends by the lease's call
		// deadline, and is not made at all once that has passed. From here
		// the step belongs to the lease, not to the client's connection: a
		// client hanging up must neither cut the provider's call short nor
		// keep its answer from being recorded (a payout made but not
		// recorded would be asked for again once the lease ran out).
		ctx := context.WithoutCancel(ctx)
		out, err := payment.Outcome{}, context.DeadlineExceeded
		if left := st.PayoutCallDeadline().Sub(s.Engine.Now()); left > 0 {
			call, cancel := context.WithTimeout(ctx, left)
			out, err = payouts.Pay(call, st.Record)
			cancel()
		}
		ctx, cancel := context.WithTimeout(ctx, payoutRecordTimeout)
		defer cancel()
		if err != nil {
			// The debit stands and the payout is unknown (or not asked):
			// the intent stays pending, and the lease is given up so that
			// verifying again asks the provider again at once (were the
			// release lost, the lease would run out).
			if _, rerr := s.advanceIntent(ctx, a, stream, st, func(_ *Tx, p payment.State) (domain.Event, error) {
				return payment.ReleasePayout(p, holder, s.Engine.Now()), nil
			}); rerr != nil {
				return pos, errors.Join(ErrPayoutUnanswered, rerr)
			}
			return pos, ErrPayoutUnanswered
		}
		res, err := s.advanceIntent(ctx, a, stream, st, func(_ *Tx, p payment.State) (domain.Event, error) {
			return payment.FinishPayout(p, holder, out, s.Engine.Now()), nil
		})
		if err != nil {
			return pos, err
		}
		if res.Position != (eventstore.Position{}) {
			pos = res.Position
		}
		if st.Phase == payment.PayingOut && st.LeaseHolder != holder {
			// The lease ran out and another holder took it before this
			// answer was recorded: that one asks again and records.
			return pos, payment.ErrPayoutInProgress
		}
	}
	return pos, nil
}

// payoutRecordTimeout bounds recording a payout's answer (or giving its
// lease up) once the client's own context no longer does.
const payoutRecordTimeout = 15 * time.Second
