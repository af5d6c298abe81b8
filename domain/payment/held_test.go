package payment

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
)

// unanswered is a debited withdrawal whose provider did not answer v1.
func unanswered(in Intent) []domain.Event {
	at := later.Add(time.Second)
	return append(debited(in), PayoutLeased{Holder: "v1", At: at, Until: at})
}

func TestWhyHeld(t *testing.T) {
	may := Payer{CanWithdraw: true}
	inLease := later.Add(time.Second)
	tests := []struct {
		name    string
		given   []domain.Event
		payer   Payer
		payouts bool
		at      time.Time
		want    Hold
		held    bool
	}{
		{name: "staged: not paying out", given: []domain.Event{staged(bankIntent())}, payer: may, payouts: true, at: last},
		{name: "paid out: not paying out", given: append(debited(bankIntent()), PayoutCompleted{Record: settledAs(bankIntent(), ledger.Success)}),
			payer: may, payouts: true, at: last},
		{name: "its lease's holder is asking the provider", given: debited(bankIntent()), payer: may, payouts: true, at: inLease},
		{name: "debited, never sent", given: debited(bankIntent()), payer: may, payouts: true, at: last, want: HoldNotSent, held: true},
		{name: "the provider did not answer", given: unanswered(bankIntent()), payer: may, payouts: true, at: last,
			want: HoldUnanswered, held: true},
		{name: "no payout provider", given: unanswered(bankIntent()), payer: Payer{Blocked: true}, at: last, want: HoldNoPayouts, held: true},
		{name: "customer blocked", given: debited(bankIntent()), payer: Payer{Blocked: true, CanWithdraw: true}, payouts: true, at: last,
			want: HoldCustomerBlocked, held: true},
		{name: "customer may not withdraw", given: unanswered(bankIntent()), payer: Payer{}, payouts: true, at: last,
			want: HoldMayNotWithdraw, held: true},
		{name: "accepted: its outcome is awaited, whoever the customer", given: accepted(bankIntent()), payer: Payer{Blocked: true},
			at: inLease, want: HoldAwaitingOutcome, held: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, held := WhyHeld(fold(tt.given...), tt.payer, tt.payouts, tt.at)
			if got != tt.want || held != tt.held {
				t.Fatalf("WhyHeld() = %q, %v; want %q, %v", got, held, tt.want, tt.held)
			}
			if held && got.Explain() == string(got) {
				t.Fatalf("hold %q has no explanation", got)
			}
		})
	}
}

func TestReturnPayout(t *testing.T) {
	inLease := later.Add(time.Second)
	returnedFailed := func(in Intent, reason string) PayoutFailed {
		return PayoutFailed{Movement: returned(in), Record: settledAs(in, ledger.Failed), Reason: reason}
	}
	tests := []struct {
		name    string
		given   []domain.Event
		ans     PayoutAnswer
		at      time.Time
		want    domain.Event
		wantErr error
	}{
		{name: "no record at the provider: the whole debit returns, once", given: unanswered(bankIntent()),
			ans: PayoutAnswer{Status: ProviderUnknown}, at: last, want: returnedFailed(bankIntent(), ReturnedReason)},
		{name: "never sent, crypto: returns likewise", given: debited(cryptoIntent()),
			ans: PayoutAnswer{Status: ProviderUnknown}, at: last, want: returnedFailed(cryptoIntent(), ReturnedReason)},
		{name: "returned already: refused", given: append(unanswered(bankIntent()), returnedFailed(bankIntent(), ReturnedReason)),
			ans: PayoutAnswer{Status: ProviderUnknown}, at: last, wantErr: ErrPayoutSettled},
		{name: "paid out already: refused", given: append(accepted(bankIntent()), PayoutCompleted{Record: settledAs(bankIntent(), ledger.Success)}),
			ans: PayoutAnswer{Status: ProviderReversed}, at: last, wantErr: ErrPayoutSettled},
		{name: "staged: nothing to return", given: []domain.Event{staged(bankIntent())}, ans: PayoutAnswer{Status: ProviderUnknown},
			at: last, wantErr: ErrPayoutSettled},
		{name: "a holder is asking the provider: refused", given: debited(bankIntent()), ans: PayoutAnswer{Status: ProviderUnknown},
			at: inLease, wantErr: ErrPayoutInProgress},
		{name: "the provider paid it: completed, nothing returns", given: unanswered(bankIntent()),
			ans: PayoutAnswer{Status: ProviderSucceeded}, at: last, want: PayoutCompleted{Record: settledAs(bankIntent(), ledger.Success)}},
		{name: "the provider failed it: its reason is recorded", given: unanswered(bankIntent()),
			ans: PayoutAnswer{Status: ProviderFailed, Reason: "account closed"}, at: last, want: returnedFailed(bankIntent(), "account closed")},
		{name: "the provider says pending: refused", given: unanswered(bankIntent()), ans: PayoutAnswer{Status: ProviderPending},
			at: last, wantErr: ErrPayoutWithProvider},
		{name: "accepted, the provider has no answer: refused", given: accepted(bankIntent()), ans: PayoutAnswer{Status: ProviderUnknown},
			at: last, wantErr: ErrPayoutWithProvider},
		{name: "accepted and reversed: returns as reversed", given: accepted(bankIntent()), ans: PayoutAnswer{Status: ProviderReversed},
			at: last, want: PayoutReversed{Movement: returned(bankIntent()), Record: settledAs(bankIntent(), ledger.Reversed)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fold(tt.given...)
			got, err := ReturnPayout(s, tt.ans, tt.at)
			if !errors.Is(err, tt.wantErr) || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ReturnPayout() = %+v, %v\nwant %+v, %v", got, err, tt.want, tt.wantErr)
			}
			s = check(t, s, got)
			if got != nil && s.Phase != Done {
				t.Fatalf("phase %q after the return, want done", s.Phase)
			}
			if got != nil {
				if _, err := ReturnPayout(s, PayoutAnswer{Status: ProviderUnknown}, tt.at); !errors.Is(err, ErrPayoutSettled) {
					t.Fatalf("a second return: %v, want %v", err, ErrPayoutSettled)
				}
			}
		})
	}
}

func TestResolvable(t *testing.T) {
	tests := []struct {
		name  string
		given []domain.Event
		want  error
	}{
		{name: "paying out", given: unanswered(bankIntent())},
		{name: "accepted", given: accepted(bankIntent())},
		{name: "staged", given: []domain.Event{staged(bankIntent())}, want: ErrPayoutSettled},
		{name: "paid out", given: append(accepted(bankIntent()), PayoutCompleted{Record: settledAs(bankIntent(), ledger.Success)}),
			want: ErrPayoutSettled},
		{name: "a deposit", given: []domain.Event{staged(depositIntent())}, want: ErrPayoutSettled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := Resolvable(fold(tt.given...)); !errors.Is(err, tt.want) {
				t.Fatalf("Resolvable() = %v, want %v", err, tt.want)
			}
		})
	}
}
