package payment

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
)

var collectAt = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func paid(amount, fee money.Amount) ProviderCharge {
	return ProviderCharge{Reference: "T1", Status: ChargeSucceeded, Amount: amount, Fee: fee, Channel: "dedicated_nuban", Account: "9900000011"}
}

func stagedDeposit(ref string, amount money.Amount) State {
	return Apply(State{}, IntentCreated{Record: ledger.Record{ID: "r-" + ref, Reference: ref, Amount: amount, Type: ledger.Deposit,
		CreditType: ledger.Credit, Status: ledger.Pending, CustomerID: "c1", MerchantID: "m1", Environment: domain.Live}})
}

func TestCreditDeposit(t *testing.T) {
	holder := AccountLink{MerchantID: "m1", CustomerID: "c1"}
	intent := stagedDeposit("dep-1", money.Naira(500))
	settledMeanwhile := intent
	settledMeanwhile.Phase = Done
	for _, tc := range []struct {
		name    string
		charge  Charge
		pc      ProviderCharge
		intent  *State
		wantErr error
		want    string // "record", "intent" or "none"
	}{
		{"a transfer of its own", Charge{}, paid(money.Naira(500), money.Naira(5)), nil, nil, "record"},
		{"the awaited intent's", Charge{}, paid(money.Naira(500), money.Naira(5)), &intent, nil, "intent"},
		{"a stale awaited entry", Charge{}, paid(money.Naira(500), money.Naira(5)), &settledMeanwhile, nil, "stale"},
		{"applied before", Charge{Applied: true}, paid(money.Naira(500), 0), nil, nil, "none"},
		{"not succeeded", Charge{}, ProviderCharge{Reference: "T1", Status: ChargePending, Amount: 100}, nil, ErrChargeNotPaid, ""},
		{"failed", Charge{}, ProviderCharge{Reference: "T1", Status: ChargeFailed, Amount: 100}, nil, ErrChargeNotPaid, ""},
		{"a fee above the amount", Charge{}, paid(100, 101), nil, ErrChargeMalformed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CreditDeposit(tc.charge, tc.pc, holder, domain.Live, tc.intent, "rec-9", collectAt)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			switch tc.want {
			case "none":
				if got != nil {
					t.Fatalf("applied twice: %+v", got)
				}
				return
			case "record":
				if got.Intent != nil || got.Applied.Movement == nil || len(got.Applied.Records) != 1 {
					t.Fatalf("%+v", got)
				}
				r := got.Applied.Records[0]
				if r.Reference != "T1" || r.Type != ledger.Deposit || r.Status != ledger.Success || r.Amount != tc.pc.Amount {
					t.Fatalf("record %+v", r)
				}
				checkChargeMovement(t, *got.Applied.Movement, tc.pc)
			case "stale":
				// credited as a transfer of its own, and the entry that
				// can no longer match is dropped
				if got.Intent != nil || got.Applied.Movement == nil || len(got.Applied.Records) != 1 ||
					got.Matched == nil || got.Matched.Reference != "dep-1" || got.Matched.Charge != "" {
					t.Fatalf("%+v", got)
				}
				checkChargeMovement(t, *got.Applied.Movement, tc.pc)
			case "intent":
				if got.Intent == nil || got.Applied.Movement != nil || got.Matched == nil || got.Matched.Reference != "dep-1" {
					t.Fatalf("%+v", got)
				}
				if r := got.Intent.Records[0]; r.ID != "r-dep-1" || r.Status != ledger.Success {
					t.Fatalf("intent record %+v", r)
				}
				checkChargeMovement(t, *got.Intent.Movement, tc.pc)
				if st := Apply(intent, *got.Intent); st.ChargeReference != "T1" || st.Phase != Done {
					t.Fatalf("intent after %+v", st)
				}
			}
		})
	}
}

// checkChargeMovement: the customer gets the whole amount, clearing nets
// what the provider settles, the fee is the platform's cost.
func checkChargeMovement(t *testing.T, m ledger.Movement, pc ProviderCharge) {
	t.Helper()
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	d := m.Deltas()
	if d[ledger.CustomerMain("c1")] != pc.Amount || d[ledger.ExternalClearing("m1")] != -(pc.Amount-pc.Fee) ||
		d[ledger.PlatformCost("m1")] != -pc.Fee {
		t.Fatalf("deltas %v", d)
	}
	if !ledger.PlatformCost("m1").MayGoNegative() || ledger.PlatformRevenue("m1").MayGoNegative() {
		t.Fatal("only the cost account (and clearing) may go below zero")
	}
}

func TestDepositAccountMatch(t *testing.T) {
	var s DepositAccount
	s = ApplyDepositAccount(s, DepositAwaited{Reference: "a", Amount: 500, At: collectAt})
	s = ApplyDepositAccount(s, DepositAwaited{Reference: "b", Amount: 500, At: collectAt.Add(time.Minute)})
	s = ApplyDepositAccount(s, DepositAwaited{Reference: "c", Amount: 700, At: collectAt.Add(time.Hour)})
	if m, ok := s.Match(500, collectAt.Add(time.Hour)); !ok || m.Reference != "a" {
		t.Fatalf("oldest of the amount: %+v %v", m, ok)
	}
	if _, ok := s.Match(700, collectAt); ok {
		t.Fatal("a transfer matched an intent staged after it")
	}
	if _, ok := s.Match(600, collectAt.Add(time.Hour)); ok {
		t.Fatal("a transfer matched another amount")
	}
	s = ApplyDepositAccount(s, DepositMatched{Reference: "a", Charge: "T1"})
	if m, ok := s.Match(500, collectAt.Add(time.Hour)); !ok || m.Reference != "b" {
		t.Fatalf("after the first was matched: %+v %v", m, ok)
	}
}

func TestFundFromCharge(t *testing.T) {
	staged := Apply(State{}, IntentCreated{Record: ledger.Record{ID: "r1", Reference: "buy-1", Amount: money.Naira(1025),
		Type: ledger.EscrowPayment, CustomerID: "c1", MerchantID: "m1", Environment: domain.Live, Status: ledger.Pending},
		Charge: &ChargeStart{Reference: "esc_r1", AuthorizationURL: "https://pay/x"}})
	c := Charge{MerchantID: "m1", CustomerID: "c1", Reference: "buy-1"}
	funding := ledger.Movement{MerchantID: "m1", Environment: domain.Live}
	funding.Move(ledger.CustomerMain("c1"), ledger.CustomerEscrow("c1"), money.Naira(1025))
	funded := staged.Record
	funded.Status = ledger.Success
	settled := Settled{Movement: &funding, Records: []ledger.Record{funded}}
	pc := ProviderCharge{Reference: "esc_r1", Status: ChargeSucceeded, Amount: money.Naira(1025), Fee: money.Naira(115)}

	got, err := FundFromCharge(c, pc, staged, &settled, "rec-2", collectAt)
	if err != nil {
		t.Fatal(err)
	}
	if got.Intent == nil || got.Applied.Movement != nil || got.Applied.Intent != "buy-1" {
		t.Fatalf("funded: %+v", got)
	}
	d := got.Intent.Movement.Deltas()
	if d[ledger.CustomerMain("c1")] != 0 || d[ledger.CustomerEscrow("c1")] != pc.Amount || d[ledger.PlatformCost("m1")] != -pc.Fee {
		t.Fatalf("one movement credits and funds: %v", d)
	}

	for name, tc := range map[string]struct {
		pc      ProviderCharge
		funding *Settled
		intent  State
	}{
		"escrow gone":        {pc, nil, staged},
		"another amount":     {ProviderCharge{Reference: "esc_r1", Status: ChargeSucceeded, Amount: money.Naira(1000)}, &settled, staged},
		"paid from a wallet": {pc, nil, Apply(staged, settled)},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := FundFromCharge(c, tc.pc, tc.intent, tc.funding, "rec-2", collectAt)
			if err != nil {
				t.Fatal(err)
			}
			if got.Applied.Movement == nil || len(got.Applied.Records) != 1 || got.Applied.Records[0].Type != ledger.Deposit ||
				got.Applied.Records[0].Amount != tc.pc.Amount {
				t.Fatalf("not credited to the wallet: %+v", got)
			}
			if tc.intent.Phase == Staged && (got.Intent == nil || got.Intent.Movement != nil || got.Intent.Records[0].Status != ledger.Failed) {
				t.Fatalf("intent not failed without money: %+v", got.Intent)
			}
			if tc.intent.Phase == Done && got.Intent != nil {
				t.Fatalf("a settled intent rewritten: %+v", got.Intent)
			}
		})
	}
	if got, err := FundFromCharge(Charge{Applied: true, Reference: "buy-1", CustomerID: "c1"}, pc, staged, &settled, "rec-2", collectAt); err != nil || got != nil {
		t.Fatalf("applied twice: %+v %v", got, err)
	}
}

// A provider's answer longer than an event keeps is refused whole, never
// clipped: a payer must not be sent to half a payment page or account.
func TestProviderAnswersPastTheirBoundsAreRefused(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	cases := []struct {
		name string
		err  error
	}{
		{"account name", BankAccount{BankName: "B", AccountNumber: "0123456789", AccountName: long(MaxBankAccountField + 1)}.Check()},
		{"account number", BankAccount{BankName: "B", AccountNumber: long(MaxBankAccountField + 1)}.Check()},
		{"payment page", ChargeStart{Reference: "esc_1", AuthorizationURL: "https://p.example/" + long(domain.MaxURL)}.Check()},
		{"charge reference", ChargeStart{Reference: long(MaxProviderReference + 1)}.Check()},
		{"paid charge reference", checkPaid(ProviderCharge{Reference: long(MaxProviderReference + 1), Status: ChargeSucceeded, Amount: 100})},
	}
	for _, c := range cases {
		if c.err == nil {
			t.Errorf("%s past its bound: accepted", c.name)
		}
	}
	if err := (BankAccount{BankName: long(MaxBankAccountField), AccountNumber: "0123456789", AccountName: "A"}).Check(); err != nil {
		t.Errorf("an account at its bounds: %v", err)
	}
	if err := (ChargeStart{Reference: long(MaxProviderReference), AuthorizationURL: long(domain.MaxURL)}).Check(); err != nil {
		t.Errorf("a charge at its bounds: %v", err)
	}
}

// TestAwaitDeposit: given a deposit account's events, staging a deposit
// at now drops the entries lapsed by then and awaits the new one, or is
// refused while MaxAwaitedDeposits still await.
func TestAwaitDeposit(t *testing.T) {
	awaited := func(ref string, at time.Time) DepositAwaited {
		return DepositAwaited{Reference: ref, Amount: money.Naira(500), At: at}
	}
	full := func(at time.Time) []domain.Event {
		var evs []domain.Event
		for i := range MaxAwaitedDeposits {
			evs = append(evs, awaited("d"+string(rune('a'+i)), at))
		}
		return evs
	}
	next := AwaitedDeposit{Reference: "new", Amount: money.Naira(700), At: collectAt}
	justLapsed := collectAt.Add(-AwaitedDepositLifetime)
	for _, tc := range []struct {
		name    string
		given   []domain.Event
		want    []domain.Event
		wantErr error
	}{
		{"the first", nil, []domain.Event{DepositAwaited(next)}, nil},
		{"beside a live one", []domain.Event{awaited("old", collectAt.Add(-time.Hour))}, []domain.Event{DepositAwaited(next)}, nil},
		{"one just lapsed is dropped", []domain.Event{awaited("old", justLapsed)},
			[]domain.Event{DepositLapsed{Reference: "old", At: collectAt}, DepositAwaited(next)}, nil},
		{"one a moment short of its lifetime stays", []domain.Event{awaited("old", justLapsed.Add(time.Second))},
			[]domain.Event{DepositAwaited(next)}, nil},
		{"a matched one is gone", []domain.Event{awaited("old", justLapsed), DepositMatched{Reference: "old", Charge: "T1"}},
			[]domain.Event{DepositAwaited(next)}, nil},
		{"a full account refuses", full(collectAt.Add(-time.Hour)), nil, ErrTooManyAwaited},
		{"a full account of lapsed entries drops them all", full(justLapsed), append(func() []domain.Event {
			var evs []domain.Event
			for _, ev := range full(justLapsed) {
				evs = append(evs, DepositLapsed{Reference: ev.(DepositAwaited).Reference, At: collectAt})
			}
			return evs
		}(), DepositAwaited(next)), nil},
		{"one under the cap after a match", append(full(collectAt.Add(-time.Hour)), DepositMatched{Reference: "da", Charge: "T1"}),
			[]domain.Event{DepositAwaited(next)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s DepositAccount
			for _, ev := range tc.given {
				s = ApplyDepositAccount(s, ev)
			}
			got, err := Await(s, next, collectAt)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				if got != nil {
					t.Fatalf("refused, yet events %+v", got)
				}
				return
			}
			if len(got) != len(tc.want) {
				t.Fatalf("events %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("event %d: %+v, want %+v", i, got[i], tc.want[i])
				}
			}
			for _, ev := range got {
				s = ApplyDepositAccount(s, ev)
			}
			if len(s.Awaited) > MaxAwaitedDeposits {
				t.Fatalf("%d awaited entries, above the cap", len(s.Awaited))
			}
			for _, a := range s.Awaited {
				if a.Lapsed(collectAt) {
					t.Fatalf("a lapsed entry kept: %+v", a)
				}
			}
		})
	}
}

// TestMatchSkipsLapsed: a transfer received after an entry's lifetime is
// never matched to it (it is credited as a deposit of its own).
func TestMatchSkipsLapsed(t *testing.T) {
	s := ApplyDepositAccount(DepositAccount{}, DepositAwaited{Reference: "a", Amount: 500, At: collectAt})
	if _, ok := s.Match(500, collectAt.Add(AwaitedDepositLifetime-time.Second)); !ok {
		t.Fatal("a live entry was not matched")
	}
	if m, ok := s.Match(500, collectAt.Add(AwaitedDepositLifetime)); ok {
		t.Fatalf("a lapsed entry matched: %+v", m)
	}
}

// TestLapseDeposit: a deposit intent awaiting a transfer fails once its
// lifetime has passed, and its entry is dropped; any other intent, or one
// still within its lifetime, is left as it is.
func TestLapseDeposit(t *testing.T) {
	staged := Apply(State{}, IntentCreated{Record: ledger.Record{ID: "r-d", Reference: "d", Amount: 500, Type: ledger.Deposit,
		Status: ledger.Pending, CustomerID: "c1", CreatedAt: collectAt}, DepositAccount: &BankAccount{AccountNumber: "9900000011"}})
	acct := ApplyDepositAccount(DepositAccount{}, DepositAwaited{Reference: "d", Amount: 500, At: collectAt})
	done := Apply(staged, Settled{Records: []ledger.Record{staged.Record}})
	builtIn := staged
	builtIn.DepositAccount = nil
	lapse := collectAt.Add(AwaitedDepositLifetime)
	for _, tc := range []struct {
		name           string
		intent         State
		acct           DepositAccount
		now            time.Time
		fails, dropped bool
	}{
		{"within its lifetime", staged, acct, lapse.Add(-time.Second), false, false},
		{"lapsed", staged, acct, lapse, true, true},
		{"lapsed, its entry dropped by a staging", staged, DepositAccount{}, lapse, true, false},
		{"settled", done, acct, lapse, false, false},
		{"on the built-in gateway", builtIn, acct, lapse, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failed, lapsed := LapseDeposit(tc.intent, tc.acct, tc.now)
			if (failed != nil) != tc.fails || (lapsed != nil) != tc.dropped {
				t.Fatalf("failed %+v, lapsed %+v", failed, lapsed)
			}
			if failed != nil {
				if failed.Movement != nil || len(failed.Records) != 1 || failed.Records[0].Status != ledger.Failed ||
					failed.Records[0].ID != "r-d" || !failed.Records[0].UpdatedAt.Equal(tc.now) {
					t.Fatalf("failed %+v", failed)
				}
			}
			if lapsed != nil && (lapsed.Reference != "d" || !lapsed.At.Equal(tc.now)) {
				t.Fatalf("lapsed %+v", lapsed)
			}
		})
	}
}
