// Withdrawals the payout resumer cannot finish, and what an operator may
// do about one: retry it, or return its money.

package payment

import (
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
)

// Hold is why a withdrawal debited a while ago is still paying out.
type Hold string

const (
	// HoldCustomerBlocked: the customer is blocked; the resumer, acting
	// without them, sends nothing for them.
	HoldCustomerBlocked Hold = "customer_blocked"
	// HoldMayNotWithdraw: the customer's permissions no longer allow a
	// withdrawal.
	HoldMayNotWithdraw Hold = "customer_may_not_withdraw"
	// HoldNoPayouts: the environment has no payout provider configured.
	HoldNoPayouts Hold = "no_payout_provider"
	// HoldUnanswered: the provider did not answer the sends so far.
	HoldUnanswered Hold = "provider_not_answering"
	// HoldNotSent: nothing was sent since the debit (its verify stopped
	// before the send); the resumer's next round sends it.
	HoldNotSent Hold = "not_sent"
	// HoldAwaitingOutcome: the provider accepted the payout and has not
	// said how it ended; only its answer settles it.
	HoldAwaitingOutcome Hold = "awaiting_provider_outcome"
)

// Explain is a hold in an operator's words.
func (h Hold) Explain() string {
	switch h {
	case HoldCustomerBlocked:
		return "the customer is blocked"
	case HoldMayNotWithdraw:
		return "the customer may no longer withdraw"
	case HoldNoPayouts:
		return "no payout provider is configured for the environment"
	case HoldUnanswered:
		return "the provider has not answered the payout"
	case HoldNotSent:
		return "not sent yet: the payout resumer sends it next"
	case HoldAwaitingOutcome:
		return "the provider accepted the payout and has not said how it ended"
	}
	return string(h)
}

// Payer is what holding a withdrawal depends on of its customer.
type Payer struct {
	Blocked     bool
	CanWithdraw bool
}

// WhyHeld says why withdrawal s is still paying out at at, as the payout
// resumer sees it: payer is its customer, payouts whether its environment
// has a payout provider. false: it is not paying out, or a holder of its
// lease is asking the provider now.
func WhyHeld(s State, payer Payer, payouts bool, at time.Time) (Hold, bool) {
	switch {
	case s.Phase != PayingOut:
		return "", false
	case s.Accepted:
		return HoldAwaitingOutcome, true
	case s.LeaseHolder != "" && at.Before(s.LeaseUntil):
		return "", false
	case !payouts:
		return HoldNoPayouts, true
	case payer.Blocked:
		return HoldCustomerBlocked, true
	case !payer.CanWithdraw:
		return HoldMayNotWithdraw, true
	case s.Unanswered > 0:
		return HoldUnanswered, true
	}
	return HoldNotSent, true
}

// ErrPayoutSettled refuses to resolve a withdrawal that is not paying out:
// it was paid out or its money returned already.
var ErrPayoutSettled = domain.Errorf(domain.Conflict, "The withdrawal is not paying out: it is settled already")

// ErrPayoutWithProvider refuses to return the money of a payout the
// provider has: it may still pay it, so only its outcome settles it.
var ErrPayoutWithProvider = domain.Errorf(domain.Conflict,
	"The provider has the payout; its outcome settles it (retry asks the provider now)")

// ReturnedReason is the reason a withdrawal returned by an operator records.
const ReturnedReason = "Returned by the operator"

// Resolvable refuses (ErrPayoutSettled) to retry or return a withdrawal
// that is not paying out.
func Resolvable(s State) error {
	if s.Record.Type != ledger.Withdrawal || s.Movement == nil || s.Phase != PayingOut {
		return ErrPayoutSettled
	}
	return nil
}

// ReturnPayout decides an operator's return of a withdrawal's money, given
// what its provider answered when asked just now (ans). The provider's
// word comes first: a final answer settles the payout as SettlePayout does
// (paid out: nothing returns). A payout the provider accepted, or says is
// pending, is refused: it may still pay it. One the provider has no
// record of (unknown), sent by nobody now, returns the whole debit to main
// once (failed, ReturnedReason); a second return finds it settled.
func ReturnPayout(s State, ans PayoutAnswer, at time.Time) (domain.Event, error) {
	if err := Resolvable(s); err != nil {
		return nil, err
	}
	if !s.Accepted && s.LeaseHolder != "" && at.Before(s.LeaseUntil) {
		return nil, ErrPayoutInProgress
	}
	switch {
	case ans.Final():
		return settle(s, ans, at), nil
	case s.Accepted || ans.Status == ProviderPending:
		return nil, ErrPayoutWithProvider
	}
	return settle(s, PayoutAnswer{Status: ProviderFailed, Reason: ReturnedReason}, at), nil
}
