package payment

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
)

// debited is a withdrawal debited at later, its lease held by v1.
func debited(in Intent) []domain.Event {
	r := record(in)
	r.UpdatedAt = later
	return []domain.Event{staged(in), PayoutStarted{Movement: withdrawalMovement(in), Record: r}.Leased("v1", later)}
}

// accepted is a debited withdrawal the provider accepted at later.
func accepted(in Intent) []domain.Event {
	return append(debited(in), PayoutAccepted{Transfer: "TRF_1", At: later})
}

// settledAs is in's record as a payout settled at last leaves it.
func settledAs(in Intent, status ledger.Status) ledger.Record {
	r := record(in)
	r.Status, r.UpdatedAt = status, last
	return r
}

// returned is the movement giving in's debit back to main.
func returned(in Intent) ledger.Movement { return withdrawalMovement(in).Reverse() }

func TestAnswerSend(t *testing.T) {
	tests := []struct {
		name   string
		given  []domain.Event
		holder string
		ans    PayoutAnswer
		want   domain.Event
		status ledger.Status
		phase  Phase
	}{
		{name: "accepted: pending, nothing moves", given: debited(bankIntent()), holder: "v1",
			ans: PayoutAnswer{Status: ProviderPending, Transfer: "TRF_1"}, want: PayoutAccepted{Transfer: "TRF_1", At: last},
			status: ledger.Pending, phase: PayingOut},
		{name: "paid at once", given: debited(bankIntent()), holder: "v1", ans: PayoutAnswer{Status: ProviderSucceeded},
			want: PayoutCompleted{Record: settledAs(bankIntent(), ledger.Success)}, status: ledger.Success, phase: Done},
		{name: "refused at once: amount and fee return to main, status failed", given: debited(bankIntent()), holder: "v1",
			ans: PayoutAnswer{Status: ProviderFailed, Reason: "account closed"},
			want: PayoutFailed{Movement: ledger.Movement{MerchantID: "m1", Environment: domain.Test, Postings: []ledger.Posting{
				{From: ledger.PlatformRevenue("m1"), To: ledger.CustomerMain("c1"), Amount: money.Naira(50)},
				{From: ledger.ExternalClearing("m1"), To: ledger.CustomerMain("c1"), Amount: money.Naira(5000)},
			}}, Record: settledAs(bankIntent(), ledger.Failed), Reason: "account closed"},
			status: ledger.Failed, phase: Done},
		{name: "reversed at once: status reversed", given: debited(cryptoIntent()), holder: "v1",
			ans:    PayoutAnswer{Status: ProviderReversed},
			want:   PayoutReversed{Movement: returned(cryptoIntent()), Record: settledAs(cryptoIntent(), ledger.Reversed)},
			status: ledger.Reversed, phase: Done},
		{name: "no answer: the lease is given up", given: debited(bankIntent()), holder: "v1",
			ans: PayoutAnswer{Status: ProviderUnknown}, want: PayoutLeased{Holder: "v1", At: later.Add(time.Second), Until: later.Add(time.Second)},
			status: ledger.Pending, phase: PayingOut},
		{name: "another holder took the lease: not recorded", given: append(debited(bankIntent()),
			PayoutLeased{Holder: "v2", At: last, Until: last.Add(PayoutLease)}), holder: "v1",
			ans: PayoutAnswer{Status: ProviderFailed}, status: ledger.Pending, phase: PayingOut},
		{name: "own lease ran out, nobody took it: still recorded", given: debited(bankIntent()), holder: "v1",
			ans: PayoutAnswer{Status: ProviderSucceeded}, want: PayoutCompleted{Record: settledAs(bankIntent(), ledger.Success)},
			status: ledger.Success, phase: Done},
		{name: "accepted already: a late answer is not recorded", given: accepted(bankIntent()), holder: "v1",
			ans: PayoutAnswer{Status: ProviderFailed}, status: ledger.Pending, phase: PayingOut},
		{name: "staged, not debited", given: []domain.Event{staged(bankIntent())}, holder: "v1",
			ans: PayoutAnswer{Status: ProviderSucceeded}, status: ledger.Pending, phase: Staged},
		{name: "settled already", given: append(debited(bankIntent()), PayoutCompleted{Record: settledAs(bankIntent(), ledger.Success)}),
			holder: "v1", ans: PayoutAnswer{Status: ProviderReversed}, status: ledger.Success, phase: Done},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fold(tt.given...)
			at := last
			if _, ok := tt.want.(PayoutLeased); ok {
				at = later.Add(time.Second) // within the lease
			}
			got := AnswerSend(s, tt.holder, tt.ans, at)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("AnswerSend() = %+v\nwant %+v", got, tt.want)
			}
			s = check(t, s, got)
			if s.Record.Status != tt.status || s.Phase != tt.phase {
				t.Fatalf("status %q phase %q, want %q %q", s.Record.Status, s.Phase, tt.status, tt.phase)
			}
		})
	}
}

func TestSettlePayout(t *testing.T) {
	inLease := later.Add(time.Second)
	completed := append(accepted(bankIntent()), PayoutCompleted{Record: settledAs(bankIntent(), ledger.Success)})
	failed := append(accepted(bankIntent()), PayoutFailed{Movement: returned(bankIntent()), Record: settledAs(bankIntent(), ledger.Failed)})
	reversed := append(accepted(bankIntent()), PayoutReversed{Movement: returned(bankIntent()), Record: settledAs(bankIntent(), ledger.Reversed)})
	tests := []struct {
		name    string
		given   []domain.Event
		at      time.Time
		ans     PayoutAnswer
		want    domain.Event
		wantErr error
		status  ledger.Status
	}{
		{name: "accepted, success: settled, nothing moves", given: accepted(bankIntent()), at: last,
			ans: PayoutAnswer{Status: ProviderSucceeded}, want: PayoutCompleted{Record: settledAs(bankIntent(), ledger.Success)},
			status: ledger.Success},
		{name: "accepted, failed: the debit returns, status failed", given: accepted(bankIntent()), at: last,
			ans:    PayoutAnswer{Status: ProviderFailed, Reason: "Could not credit account"},
			want:   PayoutFailed{Movement: returned(bankIntent()), Record: settledAs(bankIntent(), ledger.Failed), Reason: "Could not credit account"},
			status: ledger.Failed},
		{name: "accepted, reversed: the debit returns, status reversed", given: accepted(bankIntent()), at: last,
			ans:    PayoutAnswer{Status: ProviderReversed},
			want:   PayoutReversed{Movement: returned(bankIntent()), Record: settledAs(bankIntent(), ledger.Reversed)},
			status: ledger.Reversed},
		{name: "accepted, still pending: nothing", given: accepted(bankIntent()), at: last,
			ans: PayoutAnswer{Status: ProviderPending}, status: ledger.Pending},
		{name: "accepted, unknown: nothing", given: accepted(bankIntent()), at: last,
			ans: PayoutAnswer{Status: ProviderUnknown}, status: ledger.Pending},
		{name: "send unanswered, the provider has it pending: accepted", given: debited(bankIntent()), at: last,
			ans: PayoutAnswer{Status: ProviderPending, Transfer: "TRF_9"}, want: PayoutAccepted{Transfer: "TRF_9", At: last},
			status: ledger.Pending},
		{name: "send unanswered, lease over, failed: the debit returns", given: debited(bankIntent()), at: last,
			ans:    PayoutAnswer{Status: ProviderFailed},
			want:   PayoutFailed{Movement: returned(bankIntent()), Record: settledAs(bankIntent(), ledger.Failed)},
			status: ledger.Failed},
		{name: "a send in flight: a failure waits for its holder", given: debited(bankIntent()), at: inLease,
			ans: PayoutAnswer{Status: ProviderFailed}, wantErr: ErrPayoutInProgress, status: ledger.Pending},
		{name: "a send in flight: a reversal waits too", given: debited(bankIntent()), at: inLease,
			ans: PayoutAnswer{Status: ProviderReversed}, wantErr: ErrPayoutInProgress, status: ledger.Pending},
		{name: "a send in flight: a success is a fact", given: debited(bankIntent()), at: inLease,
			ans: PayoutAnswer{Status: ProviderSucceeded}, want: PayoutCompleted{Record: func() ledger.Record {
				r := settledAs(bankIntent(), ledger.Success)
				r.UpdatedAt = inLease
				return r
			}()}, status: ledger.Success},
		{name: "succeeded, then reversed: the debit returns once", given: completed, at: last,
			ans:    PayoutAnswer{Status: ProviderReversed, Reason: "returned by the bank"},
			want:   PayoutReversed{Movement: returned(bankIntent()), Record: settledAs(bankIntent(), ledger.Reversed), Reason: "returned by the bank"},
			status: ledger.Reversed},
		{name: "succeeded, success again: nothing", given: completed, at: last, ans: PayoutAnswer{Status: ProviderSucceeded}, status: ledger.Success},
		{name: "succeeded, then failed: contradicts, nothing moves", given: completed, at: last, ans: PayoutAnswer{Status: ProviderFailed}, status: ledger.Success},
		{name: "failed: a second failure returns nothing", given: failed, at: last, ans: PayoutAnswer{Status: ProviderFailed}, status: ledger.Failed},
		{name: "failed, then reversed: returned once only", given: failed, at: last, ans: PayoutAnswer{Status: ProviderReversed}, status: ledger.Failed},
		{name: "failed, then success: nothing moves", given: failed, at: last, ans: PayoutAnswer{Status: ProviderSucceeded}, status: ledger.Failed},
		{name: "reversed: a second reversal returns nothing", given: reversed, at: last, ans: PayoutAnswer{Status: ProviderReversed}, status: ledger.Reversed},
		{name: "staged, not debited: nothing to settle", given: []domain.Event{staged(bankIntent())}, at: last,
			ans: PayoutAnswer{Status: ProviderFailed}, status: ledger.Pending},
		{name: "no intent", at: last, ans: PayoutAnswer{Status: ProviderSucceeded}},
		{name: "a deposit", given: []domain.Event{staged(depositIntent()),
			Settled{Movement: depositMovement(), Records: []ledger.Record{settledRecord(depositIntent(), ledger.Success)}}},
			at: last, ans: PayoutAnswer{Status: ProviderReversed}, status: ledger.Success},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fold(tt.given...)
			got, err := SettlePayout(s, tt.ans, tt.at)
			if !errors.Is(err, tt.wantErr) || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("SettlePayout() = %+v, %v\nwant %+v, %v", got, err, tt.want, tt.wantErr)
			}
			s = check(t, s, got)
			if s.Record.Status != tt.status {
				t.Fatalf("status %q, want %q", s.Record.Status, tt.status)
			}
			if s.Phase == Done {
				// Whatever comes after, nothing more moves.
				for _, st := range []ProviderStatus{ProviderSucceeded, ProviderFailed, ProviderReversed, ProviderPending, ProviderUnknown} {
					ev, _ := SettlePayout(s, PayoutAnswer{Status: st}, last.Add(time.Hour))
					if ev != nil && (s.Record.Status != ledger.Success || st != ProviderReversed) {
						t.Fatalf("after %q, %q decides %+v", s.Record.Status, st, ev)
					}
				}
			}
		})
	}
}

// check applies ev (when there is one) after checking it is a well-formed
// ledger entry and that a returned debit undoes the debit exactly.
func check(t *testing.T, s State, ev domain.Event) State {
	t.Helper()
	if ev == nil {
		return s
	}
	checkEntry(t, ev)
	var back *ledger.Movement
	switch e := ev.(type) {
	case PayoutFailed:
		back = &e.Movement
	case PayoutReversed:
		back = &e.Movement
	}
	if back != nil {
		net := s.Movement.Deltas()
		for a, v := range back.Deltas() {
			net[a] += v
		}
		for a, v := range net {
			if v != 0 {
				t.Fatalf("%s is off by %d after the debit returned", a, v)
			}
		}
	}
	return Apply(s, ev)
}

func TestPollDue(t *testing.T) {
	s := fold(accepted(bankIntent())...)
	if s.PollDue(PayoutPollAfter, later.Add(PayoutPollAfter-time.Second)) {
		t.Fatal("due before the wait is over")
	}
	if !s.PollDue(PayoutPollAfter, later.Add(PayoutPollAfter)) {
		t.Fatal("not due once the wait is over")
	}
	if d := fold(debited(bankIntent())...); d.PollDue(0, last) || !d.AwaitingSend() {
		t.Fatal("a payout not accepted is to be sent, not polled")
	}
	if d := fold(append(accepted(bankIntent()), PayoutCompleted{Record: settledAs(bankIntent(), ledger.Success)})...); d.PollDue(0, last) {
		t.Fatal("a settled payout is due a poll")
	}
}
