// A withdrawal's payout: the money rules of an asynchronous rail.
//
// Verify debits the withdrawal (Execute: PayoutStarted) and the debit's
// holder of the payout lease asks the provider to send it. The provider
// answers at once with a final outcome (the built-in test payouts do) or
// accepts the payout, which then stays pending until its outcome arrives
// by whichever way comes first: the provider's event, a poll, or
// reconciliation. All three ask the provider where the payout stands and
// hand the answer to SettlePayout, so the outcome is recorded once
// whichever way brings it, and a failed or reversed payout returns the
// debit once.

package payment

import (
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
)

// ProviderStatus is what the provider says of a payout.
type ProviderStatus string

const (
	// ProviderPending: accepted and not final (Paystack's pending, queued,
	// received, otp): the debit stands and the withdrawal stays pending.
	ProviderPending ProviderStatus = "pending"
	// ProviderSucceeded: paid to the beneficiary.
	ProviderSucceeded ProviderStatus = "success"
	// ProviderFailed: the provider will never pay it; the debit returns.
	ProviderFailed ProviderStatus = "failed"
	// ProviderReversed: paid, or about to be, and returned to the
	// provider's balance; the debit returns, even after a success.
	ProviderReversed ProviderStatus = "reversed"
	// ProviderUnknown: the provider has no answer (it has no record of the
	// payout yet, or the call timed out or lost its answer). Nothing is
	// decided: the debit stands and the payout is asked again later.
	ProviderUnknown ProviderStatus = "unknown"
)

// PayoutAnswer is one answer of the provider about a payout.
type PayoutAnswer struct {
	Status ProviderStatus
	// Reason is the provider's words for a failure or reversal.
	Reason string
	// Transfer is the provider's own id of the payout, kept for support.
	Transfer string
}

// Final reports whether the answer ends the payout's wait.
func (a PayoutAnswer) Final() bool {
	return a.Status == ProviderSucceeded || a.Status == ProviderFailed || a.Status == ProviderReversed
}

// The payout lease. A verify that debits a withdrawal, or finds one not yet
// accepted by the provider and takes the lease, is the only one that asks
// the provider to send it until the lease ends; others answer
// ErrPayoutInProgress. So two sends never run at once, and the provider's
// idempotency per record id is needed only when a holder vanished (a
// crash) or its call outlived PayoutCallTimeout. Once the provider has
// accepted the payout nothing is sent again, and the lease has no use.
const (
	// PayoutLease is how long a holder has the payout step.
	PayoutLease = time.Minute
	// PayoutCallTimeout bounds the holder's call to the provider, counted
	// from when the lease was taken (PayoutCallDeadline), well inside the
	// lease: a call still running when the lease ends could overlap the
	// next holder's.
	PayoutCallTimeout = 45 * time.Second
	// PayoutPollAfter is how long an accepted payout waits for the
	// provider's event before the service asks the provider itself.
	PayoutPollAfter = 10 * time.Minute
)

// PayoutCallDeadline is when the lease holder's call to the provider must
// be over: PayoutCallTimeout after the lease was taken, not after the call
// starts, so that however long recording the lease took (a slow append, a
// pause) the call ends PayoutLease-PayoutCallTimeout before the lease does.
func (s State) PayoutCallDeadline() time.Time {
	return s.LeaseUntil.Add(PayoutCallTimeout - PayoutLease)
}

// AwaitingSend reports whether the withdrawal is debited and the provider
// has not yet accepted its payout: it is to be sent (again).
func (s State) AwaitingSend() bool { return s.Phase == PayingOut && !s.Accepted }

// AwaitingOutcome reports whether the provider accepted the payout and its
// outcome has not come yet.
func (s State) AwaitingOutcome() bool { return s.Phase == PayingOut && s.Accepted }

// PollDue reports whether an accepted payout has waited for its outcome
// long enough (after) that the provider is to be asked.
func (s State) PollDue(after time.Duration, at time.Time) bool {
	return s.AwaitingOutcome() && !at.Before(s.AcceptedAt.Add(after))
}

// ErrPayoutInProgress: another verify holds the payout lease and is asking
// the provider; verifying again later returns the outcome.
var ErrPayoutInProgress = &domain.Error{Code: domain.Unavailable, Resumable: true,
	Message: "The payout is in progress; verify again later"}

// Leased gives the payout lease of a debit to holder, from at.
func (e PayoutStarted) Leased(holder string, at time.Time) PayoutStarted {
	e.LeaseHolder, e.LeaseUntil = holder, at.Add(PayoutLease)
	return e
}

// LeasePayout decides whether holder, a verify that found the withdrawal
// debited and not yet accepted, may ask the provider to send it: nil when
// there is nothing to send (not paying out, or accepted already),
// ErrPayoutInProgress while another verify's lease runs.
func LeasePayout(s State, holder string, at time.Time) (domain.Event, error) {
	if !s.AwaitingSend() {
		return nil, nil
	}
	if s.LeaseHolder != holder && at.Before(s.LeaseUntil) {
		return nil, ErrPayoutInProgress
	}
	return PayoutLeased{Holder: holder, At: at, Until: at.Add(PayoutLease)}, nil
}

// ReleasePayout gives up holder's lease after its provider did not answer,
// so that the next verify asks again at once; nil when holder no longer
// holds it (it ran out and another verify took it) or the payout is no
// longer to be sent.
func ReleasePayout(s State, holder string, at time.Time) domain.Event {
	if !s.AwaitingSend() || s.LeaseHolder != holder || !at.Before(s.LeaseUntil) {
		return nil
	}
	return PayoutLeased{Holder: holder, At: at, Until: at}
}

// AnswerSend records the provider's answer to holder's request to send the
// payout: accepted (the withdrawal stays pending, and is never sent
// again), a final outcome (settled as SettlePayout does), or no answer (the
// lease is given up, so the next verify or the resumer sends again). Only
// the lease's holder records: nil when the payout is no longer to be sent,
// or when another verify has taken the lease since holder's ran out
// (holder was slow to record, or its clock behind). That verify asks the
// provider again and records what it answers; were the late answer
// recorded too, a refusal and a retry that paid would both count, the
// money returned to the customer and paid out.
func AnswerSend(s State, holder string, ans PayoutAnswer, at time.Time) domain.Event {
	if !s.AwaitingSend() || s.Movement == nil || s.LeaseHolder != holder {
		return nil
	}
	switch {
	case ans.Status == ProviderPending:
		return PayoutAccepted{Transfer: ans.Transfer, At: at}
	case ans.Final():
		return settle(s, ans, at)
	}
	return ReleasePayout(s, holder, at)
}

// SettlePayout records where the provider says a payout stands when it is
// asked (a poll, the provider's event once verified, reconciliation): the
// one home of which outcomes move money back, and when.
//
//   - success settles a payout still paying out; nothing moves (the debit
//     went to clearing, and clearing to the provider).
//   - failed returns the whole debit (fee included) to main, once; status
//     failed.
//   - reversed returns it likewise, once, even after a success (the
//     provider took the money back); status reversed.
//   - pending marks a payout not yet known as accepted so (it is not sent
//     again); unknown decides nothing.
//   - a failure or reversal of a payout not yet accepted while a holder's
//     lease runs waits (ErrPayoutInProgress): that holder is sending it,
//     and its answer is the one to record.
//
// An answer for a payout already settled, or contradicting its outcome
// (a success after a failure), moves nothing: returned money is never
// returned twice, and a payout is never settled twice.
func SettlePayout(s State, ans PayoutAnswer, at time.Time) (domain.Event, error) {
	if s.Record.Type != ledger.Withdrawal || s.Movement == nil {
		return nil, nil
	}
	if s.Phase == Done {
		if s.Record.Status == ledger.Success && ans.Status == ProviderReversed {
			return settle(s, ans, at), nil
		}
		return nil, nil
	}
	if s.Phase != PayingOut {
		return nil, nil
	}
	switch ans.Status {
	case ProviderPending:
		if s.Accepted {
			return nil, nil
		}
		return PayoutAccepted{Transfer: ans.Transfer, At: at}, nil
	case ProviderFailed, ProviderReversed:
		if !s.Accepted && s.LeaseHolder != "" && at.Before(s.LeaseUntil) {
			return nil, ErrPayoutInProgress
		}
		return settle(s, ans, at), nil
	case ProviderSucceeded:
		return settle(s, ans, at), nil
	}
	return nil, nil
}

// settle is the event of a final answer for a debited withdrawal.
func settle(s State, ans PayoutAnswer, at time.Time) domain.Event {
	r := s.Record
	r.UpdatedAt = at
	switch ans.Status {
	case ProviderSucceeded:
		r.Status = ledger.Success
		return PayoutCompleted{Record: r}
	case ProviderFailed:
		r.Status = ledger.Failed
		return PayoutFailed{Movement: s.Movement.Reverse(), Record: r, Reason: ans.Reason}
	default:
		r.Status = ledger.Reversed
		return PayoutReversed{Movement: s.Movement.Reverse(), Record: r, Reason: ans.Reason}
	}
}
