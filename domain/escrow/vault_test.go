package escrow

import (
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ids"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
)

// vaultFees are the default vault rates: 2.5% of the pot, half of it the
// merchant's.
var vaultFees = FeeTerms{EscrowFeeBps: 250, CommissionBps: 5000}

func stakes(pairs ...any) []Stake {
	var out []Stake
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, Stake{CustomerID: pairs[i].(string), Amount: money.Naira(int64(pairs[i+1].(int)))})
	}
	return out
}

// plenty is a balance every participant of the fixtures has.
func plenty(ss []Stake) map[string]money.Amount {
	out := map[string]money.Amount{}
	for _, s := range ss {
		out[s.CustomerID] = money.Naira(1_000_000)
	}
	return out
}

// newVault creates the vault e1 of m1 at t0 with the stakes given.
func newVault(t *testing.T, fees FeeTerms, ss []Stake) VaultCreated {
	t.Helper()
	ev, err := CreateVault("e1", "PT_E1", "m1", domain.Test, fees, VaultDraft{Purpose: "Pool", Participants: ss}, plenty(ss), t0)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// vaultRecord is a record of the vault e1 at at.
func vaultRecord(key string, typ ledger.Type, credit ledger.CreditType, customerID string, amount, fee money.Amount, at time.Time) ledger.Record {
	r := record(key, typ, customerID, amount, fee)
	r.ID, r.CreditType, r.CreatedAt, r.UpdatedAt = ids.Derived(at, "e1/"+key), credit, at, at
	return r
}

func TestVaultDraftCheck(t *testing.T) {
	tests := []struct {
		name string
		d    VaultDraft
		msg  string
	}{
		{name: "two participants, pot exactly 1000", d: VaultDraft{Purpose: "p", Participants: stakes("a", 500, "b", 500)}},
		{name: "no purpose", d: VaultDraft{Purpose: "  ", Participants: stakes("a", 500, "b", 500)}, msg: "purpose is required"},
		{name: "purpose too long", d: VaultDraft{Purpose: strings.Repeat("x", 201), Participants: stakes("a", 500, "b", 500)},
			msg: "purpose must be at most 200 characters"},
		{name: "description too long", d: VaultDraft{Purpose: "p", Description: strings.Repeat("x", 2001), Participants: stakes("a", 500, "b", 500)},
			msg: "description must be at most 2000 characters"},
		{name: "no participants", d: VaultDraft{Purpose: "p"}, msg: "A vault needs at least 2 unique participants"},
		{name: "one participant", d: VaultDraft{Purpose: "p", Participants: stakes("a", 5000)}, msg: "A vault needs at least 2 unique participants"},
		{name: "one customer twice", d: VaultDraft{Purpose: "p", Participants: stakes("a", 500, "a", 500)},
			msg: "A vault needs at least 2 unique participants"},
		{name: "a repeat among others", d: VaultDraft{Purpose: "p", Participants: stakes("a", 500, "b", 500, "a", 1)},
			msg: "participants[2].customerId repeats a participant"},
		{name: "pot one naira short", d: VaultDraft{Purpose: "p", Participants: stakes("a", 500, "b", 499)}, msg: "Vault pot must be at least 1000"},
		{name: "no customer id", d: VaultDraft{Purpose: "p", Participants: []Stake{{CustomerID: "a", Amount: money.Naira(600)}, {Amount: money.Naira(600)}}},
			msg: "participants[1].customerId is required"},
		{name: "zero stake", d: VaultDraft{Purpose: "p", Participants: stakes("a", 1000, "b", 0)}, msg: "participants[1].amount must be a positive integer"},
		{name: "negative stake", d: VaultDraft{Purpose: "p", Participants: stakes("a", -5, "b", 2000)}, msg: "participants[0].amount must be a positive integer"},
		{name: "kobo in a stake", d: VaultDraft{Purpose: "p", Participants: []Stake{{"a", money.Naira(600) + 50}, {"b", money.Naira(600)}}},
			msg: "participants[0].amount must be a positive integer"},
		{name: "stake over the maximum", d: VaultDraft{Purpose: "p", Participants: []Stake{{"a", money.Max + 100}, {"b", money.Naira(600)}}},
			msg: "participants[0].amount must be a positive integer"},
		{name: "pot over the maximum", d: VaultDraft{Purpose: "p", Participants: []Stake{{"a", money.Max}, {"b", money.Naira(1)}}},
			msg: "Vault pot must be at most 100000000000"},
	}
	many := VaultDraft{Purpose: "p"}
	for i := 0; i <= MaxVaultParticipants; i++ {
		many.Participants = append(many.Participants, Stake{CustomerID: fmt.Sprintf("c%d", i), Amount: money.Naira(100)})
	}
	tests = append(tests, struct {
		name string
		d    VaultDraft
		msg  string
	}{name: "one participant too many", d: many, msg: fmt.Sprintf("A vault allows at most %d participants", MaxVaultParticipants)})
	many.Participants = many.Participants[:MaxVaultParticipants]
	tests = append(tests, struct {
		name string
		d    VaultDraft
		msg  string
	}{name: "the most participants", d: many})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.d.Check()
			if tt.msg == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if _, err := CreateVault("e1", "PT_E1", "m1", domain.Test, vaultFees, tt.d, plenty(tt.d.Participants), t0); err != nil {
					t.Fatalf("create refused: %v", err)
				}
				return
			}
			if domain.ErrorMessage(err) != tt.msg || domain.ErrorCode(err) != domain.Invalid {
				t.Fatalf("err = %v, want 400 %q", err, tt.msg)
			}
			// CreateVault applies the same rules.
			if _, err := CreateVault("e1", "PT_E1", "m1", domain.Test, vaultFees, tt.d, plenty(tt.d.Participants), t0); domain.ErrorMessage(err) != tt.msg {
				t.Fatalf("CreateVault: %v, want %q", err, tt.msg)
			}
		})
	}
}

func TestCreateVault(t *testing.T) {
	ss := stakes("a", 1000, "b", 2000, "c", 3000)
	ev, err := CreateVault("e1", "PT_E1", "m1", domain.Test, vaultFees,
		VaultDraft{Purpose: " Pool ", Description: "d", CategoryID: "cat1", Participants: ss},
		map[string]money.Amount{"a": money.Naira(1000), "b": money.Naira(5000), "c": money.Naira(3000) + 1}, t0)
	if err != nil {
		t.Fatal(err)
	}
	wantMove := movement(post(ledger.CustomerMain("a"), ledger.CustomerEscrow("a"), money.Naira(1000)),
		post(ledger.CustomerMain("b"), ledger.CustomerEscrow("b"), money.Naira(2000)),
		post(ledger.CustomerMain("c"), ledger.CustomerEscrow("c"), money.Naira(3000)))
	if !reflect.DeepEqual(ev.Movement, wantMove) {
		t.Fatalf("movement %+v", ev.Movement)
	}
	checkBalanced(t, ev.Movement)
	wantRecords := []ledger.Record{
		vaultRecord("stake-a", ledger.VaultStake, ledger.Debit, "a", money.Naira(1000), 0, t0),
		vaultRecord("stake-b", ledger.VaultStake, ledger.Debit, "b", money.Naira(2000), 0, t0),
		vaultRecord("stake-c", ledger.VaultStake, ledger.Debit, "c", money.Naira(3000), 0, t0),
	}
	if !reflect.DeepEqual(ev.Records, wantRecords) {
		t.Fatalf("records\n got %+v\nwant %+v", ev.Records, wantRecords)
	}
	s := fold(ev)
	want := State{ID: "e1", PaymentToken: "PT_E1", MerchantID: "m1", Environment: domain.Test,
		Terms: Terms{Amount: money.Naira(6000), Purpose: "Pool", Description: "d", CategoryID: "cat1"}, FeeTerms: vaultFees,
		Fee: money.Naira(150), ImageURLs: []string{}, TotalQuantity: 1, Channel: "api", Status: Ongoing, Logs: []string{"ONGOING"},
		CreatedAt: t0, UpdatedAt: t0, SettlementType: VaultSettlement, Participants: []Participant{
			{CustomerID: "a", Amount: money.Naira(1000), Status: ParticipantStaked, StakedAt: t0},
			{CustomerID: "b", Amount: money.Naira(2000), Status: ParticipantStaked, StakedAt: t0},
			{CustomerID: "c", Amount: money.Naira(3000), Status: ParticipantStaked, StakedAt: t0}}}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("state\n got %+v\nwant %+v", s, want)
	}
	if s.Status.Phase() != Opened || !s.Exists() || s.Type() != VaultSettlement {
		t.Fatalf("a new vault is OPENED / ONGOING: %s %s", s.Status.Phase(), s.Type())
	}

	// Every stake must be covered; the first one short is named, and
	// nothing is decided.
	for _, tc := range []struct {
		name      string
		available map[string]money.Amount
		msg       string
	}{
		{"one kobo short", map[string]money.Amount{"a": money.Naira(1000), "b": money.Naira(2000) - 1, "c": money.Naira(3000)},
			"Insufficient balance for participant b"},
		{"no wallet", map[string]money.Amount{"a": money.Naira(1000), "b": money.Naira(2000)}, "Insufficient balance for participant c"},
		{"two short", map[string]money.Amount{"b": money.Naira(2000), "c": 0}, "Insufficient balance for participant a"},
	} {
		ev, err := CreateVault("e1", "PT_E1", "m1", domain.Test, vaultFees, VaultDraft{Purpose: "p", Participants: ss}, tc.available, t0)
		if domain.ErrorMessage(err) != tc.msg || domain.ErrorCode(err) != domain.Invalid || ev.ID != "" {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.msg)
		}
	}

	// The fee is the merchant's vault rate, frozen on the vault: half-up to
	// a whole naira.
	for _, tc := range []struct {
		fees FeeTerms
		ss   []Stake
		fee  money.Amount
	}{
		{vaultFees, stakes("a", 500, "b", 500), money.Naira(25)},
		{vaultFees, stakes("a", 510, "b", 500), money.Naira(25)},           // 25.25
		{vaultFees, stakes("a", 500, "b", 500, "c", 500), money.Naira(38)}, // 37.5 rounds up
		{FeeTerms{EscrowFeeBps: 333, CommissionBps: 1}, stakes("a", 1234, "b", 1), money.Naira(41)},
		{FeeTerms{}, stakes("a", 1234, "b", 1), 0},
	} {
		if got := fold(newVault(t, tc.fees, tc.ss)); got.Fee != tc.fee || got.FeeTerms != tc.fees {
			t.Errorf("%v at %+v: fee %s, want %s", tc.ss, tc.fees, got.Fee, tc.fee)
		}
	}
}

// oracleShares divides fee among stakes by the largest remainder with
// exact rationals, written apart from FeeSharesByStake.
func oracleShares(fee money.Amount, ss []money.Amount) []money.Amount {
	var pot int64
	for _, a := range ss {
		pot += int64(a)
	}
	out := make([]money.Amount, len(ss))
	fracs := make([]*big.Rat, len(ss))
	var sum int64
	for i, a := range ss {
		exact := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(int64(fee)), big.NewInt(int64(a))), big.NewInt(pot))
		floor := new(big.Int).Quo(exact.Num(), exact.Denom())
		out[i] = money.Amount(floor.Int64())
		fracs[i] = new(big.Rat).Sub(exact, new(big.Rat).SetInt(floor))
		sum += floor.Int64()
	}
	for left := int64(fee) - sum; left > 0; left-- {
		best := -1
		for i := range ss {
			if fracs[i] != nil && (best < 0 || fracs[i].Cmp(fracs[best]) > 0) {
				best = i
			}
		}
		out[best]++
		fracs[best] = nil
	}
	return out
}

func TestFeeSharesByStake(t *testing.T) {
	n := money.Naira
	for _, tc := range []struct {
		name   string
		fee    money.Amount
		stakes []money.Amount
		want   []money.Amount
	}{
		{"exact thirds", n(150), []money.Amount{n(1000), n(2000), n(3000)}, []money.Amount{n(25), n(50), n(75)}},
		// 38 naira over three equal stakes: 1266.67 kobo each; the two kobo
		// left go to the first two (a tie goes to the earlier stake).
		{"odd fee, equal stakes", n(38), []money.Amount{n(500), n(500), n(500)}, []money.Amount{1267, 1267, 1266}},
		// 75 naira over 1000, 1000, 1010: 2491.69, 2491.69, 2516.61.
		{"largest remainders win", n(75), []money.Amount{n(1000), n(1000), n(1010)}, []money.Amount{2492, 2492, 2516}},
		// 25 naira over 333, 333, 344: 824.26, 824.26, 851.49.
		{"the larger remainder is the larger stake", n(25), []money.Amount{n(333), n(333), n(344)}, []money.Amount{824, 824, 852}},
		{"one kobo fee", 1, []money.Amount{n(1), n(999), n(1)}, []money.Amount{0, 1, 0}},
		{"no fee", 0, []money.Amount{n(1), n(999)}, []money.Amount{0, 0}},
		{"whole pot", n(1000), []money.Amount{n(1), n(999)}, []money.Amount{n(1), n(999)}},
		{"product past int64", money.Max / 40 * 3, []money.Amount{money.Max, money.Max, money.Max}, []money.Amount{money.Max / 40, money.Max / 40, money.Max / 40}},
	} {
		got := FeeSharesByStake(tc.fee, tc.stakes)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
		if o := oracleShares(tc.fee, tc.stakes); !reflect.DeepEqual(o, tc.want) {
			t.Errorf("%s: the oracle says %v", tc.name, o)
		}
	}
	rng := rand.New(rand.NewPCG(20261127, 19))
	for i := 0; i < 2000; i++ {
		ss := make([]money.Amount, 2+rng.IntN(12))
		var pot money.Amount
		for j := range ss {
			ss[j] = money.Naira(1 + rng.Int64N(50_000))
			pot += ss[j]
		}
		fee := VaultFee(pot, 1+rng.Int64N(1000))
		got := FeeSharesByStake(fee, ss)
		var sum money.Amount
		for j, sh := range got {
			if sh < 0 || sh > ss[j] {
				t.Fatalf("share %s of stake %s", sh, ss[j])
			}
			sum += sh
		}
		if sum != fee || !reflect.DeepEqual(got, oracleShares(fee, ss)) {
			t.Fatalf("fee %s over %v: %v (sum %s), oracle %v", fee, ss, got, sum, oracleShares(fee, ss))
		}
	}
}

func TestDeclareWinner(t *testing.T) {
	created := newVault(t, vaultFees, stakes("a", 1000, "b", 2000, "c", 3000))
	s := fold(created)
	ev, err := DeclareWinner(s, " b ", now)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := ledger.CustomerEscrow("a"), ledger.CustomerEscrow("b"), ledger.CustomerEscrow("c")
	bMain := ledger.CustomerMain("b")
	// Pot 6000, fee 150, commission 75: b's own stake pays b first.
	wantMove := movement(post(b, bMain, money.Naira(2000)), post(a, bMain, money.Naira(1000)), post(c, bMain, money.Naira(2850)),
		post(c, merchantMain, money.Naira(75)), post(c, platform, money.Naira(75)))
	if !reflect.DeepEqual(ev.Movement, wantMove) {
		t.Fatalf("movement\n got %+v\nwant %+v", ev.Movement, wantMove)
	}
	checkBalanced(t, ev.Movement)
	wantRecords := []ledger.Record{
		vaultRecord("payout", ledger.VaultPayout, ledger.Credit, "b", money.Naira(5850), money.Naira(150), now),
		vaultRecord("commission", ledger.Commission, ledger.Credit, "", money.Naira(75), 0, now),
	}
	if !reflect.DeepEqual(ev.Records, wantRecords) {
		t.Fatalf("records\n got %+v\nwant %+v", ev.Records, wantRecords)
	}
	if ev.Status != Completed || ev.WinnerID != "b" || ev.RefundedBy != "" {
		t.Fatalf("event %+v", ev)
	}
	after := fold(created, ev)
	if after.Status != Completed || after.Status.Phase() != Closed || after.WinnerID != "b" || !after.CompletedAt.Equal(now) ||
		!reflect.DeepEqual(after.Logs, []string{"ONGOING", "COMPLETED"}) || after.RefundedBy != "" {
		t.Fatalf("settled vault %+v", after)
	}
	for _, p := range after.Participants {
		if p.Status != ParticipantReleased || p.SettledAt == nil || !p.SettledAt.Equal(now) || !p.StakedAt.Equal(t0) {
			t.Fatalf("participant %+v", p)
		}
	}
	if s.Participants[0].Status != ParticipantStaked || s.Participants[0].SettledAt != nil {
		t.Fatal("Apply changed the state it was given")
	}

	for _, tc := range []struct {
		name    string
		s       State
		winner  string
		wantErr error
	}{
		{"not a participant", s, "d", ErrWinnerNotIn},
		{"the merchant is no participant", s, "m1", ErrWinnerNotIn},
		{"no winner", s, " ", ErrWinnerRequired},
		{"declared already", after, "b", ErrVaultSettled},
		{"declared already, another winner", after, "a", ErrVaultSettled},
		{"settled already, whoever is named", after, "", ErrVaultSettled},
		{"cancelled already", fold(created, mustCancel(t, s)), "a", ErrVaultSettled},
		{"a standard escrow", fold(link(), funded("b1")), "b1", ErrActionNotAllowed},
		{"no such escrow", State{}, "a", ErrNotFound},
		{"a deleted escrow", fold(link(), Deleted{At: now}), "a", ErrNotFound},
	} {
		if _, err := DeclareWinner(tc.s, tc.winner, now); !errors.Is(err, tc.wantErr) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.wantErr)
		}
	}
}

func mustCancel(t *testing.T, s State) VaultSettled {
	t.Helper()
	ev, err := CancelVault(s, "m1", now)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestCancelVault(t *testing.T) {
	created := newVault(t, vaultFees, stakes("a", 1000, "b", 1000, "c", 1010))
	s := fold(created)
	if s.Fee != money.Naira(75) { // 75.25
		t.Fatalf("fee %s", s.Fee)
	}
	ev := mustCancel(t, s)
	a, b, c := ledger.CustomerEscrow("a"), ledger.CustomerEscrow("b"), ledger.CustomerEscrow("c")
	aMain, bMain, cMain := ledger.CustomerMain("a"), ledger.CustomerMain("b"), ledger.CustomerMain("c")
	// Shares 24.92, 24.92, 25.16 (largest remainders); each stake refunds
	// its owner first, and what is left pays commission then the platform.
	wantMove := movement(post(a, aMain, money.Naira(1000)-2492), post(b, bMain, money.Naira(1000)-2492),
		post(c, cMain, money.Naira(1010)-2516), post(a, merchantMain, 2492), post(b, merchantMain, 3750-2492),
		post(b, platform, 2492-(3750-2492)), post(c, platform, 2516))
	if !reflect.DeepEqual(ev.Movement, wantMove) {
		t.Fatalf("movement\n got %+v\nwant %+v", ev.Movement, wantMove)
	}
	checkBalanced(t, ev.Movement)
	wantRecords := []ledger.Record{
		vaultRecord("refund-a", ledger.VaultRefund, ledger.Credit, "a", money.Naira(1000)-2492, 2492, now),
		vaultRecord("refund-b", ledger.VaultRefund, ledger.Credit, "b", money.Naira(1000)-2492, 2492, now),
		vaultRecord("refund-c", ledger.VaultRefund, ledger.Credit, "c", money.Naira(1010)-2516, 2516, now),
		vaultRecord("commission", ledger.Commission, ledger.Credit, "", 3750, 0, now),
	}
	if !reflect.DeepEqual(ev.Records, wantRecords) {
		t.Fatalf("records\n got %+v\nwant %+v", ev.Records, wantRecords)
	}
	after := fold(created, ev)
	if after.Status != Refunded || after.Status.Phase() != Closed || after.WinnerID != "" || after.RefundedBy != "m1" ||
		!reflect.DeepEqual(after.Logs, []string{"ONGOING", "REFUNDED"}) {
		t.Fatalf("cancelled vault %+v", after)
	}
	for _, p := range after.Participants {
		if p.Status != ParticipantRefunded || p.SettledAt == nil || !p.SettledAt.Equal(now) {
			t.Fatalf("participant %+v", p)
		}
	}
	for _, tc := range []struct {
		name    string
		s       State
		wantErr error
	}{
		{"cancelled already", after, ErrVaultSettled},
		{"won already", fold(created, mustWin(t, s, "a")), ErrVaultSettled},
		{"a standard escrow", fold(link(), funded("b1")), ErrActionNotAllowed},
		{"no such escrow", State{}, ErrNotFound},
	} {
		if _, err := CancelVault(tc.s, "m1", now); !errors.Is(err, tc.wantErr) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.wantErr)
		}
	}

	// A fee of the whole pot refunds nothing and writes no refund record.
	all := fold(newVault(t, FeeTerms{EscrowFeeBps: 10000, CommissionBps: 10000}, stakes("a", 600, "b", 400)))
	ev = mustCancel(t, all)
	if len(ev.Records) != 1 || ev.Records[0].Type != ledger.Commission || ev.Records[0].Amount != money.Naira(1000) {
		t.Fatalf("records %+v", ev.Records)
	}
	checkBalanced(t, ev.Movement)
}

func mustWin(t *testing.T, s State, winner string) VaultSettled {
	t.Helper()
	ev, err := DeclareWinner(s, winner, now)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// Vaults cannot be disputed or split, whatever their status.
func TestVaultNotDisputable(t *testing.T) {
	created := newVault(t, vaultFees, stakes("a", 1000, "b", 1000))
	s := fold(created)
	for _, st := range []State{s, fold(created, mustWin(t, s, "a")), fold(created, mustCancel(t, s))} {
		for _, who := range []string{"a", "b", "m1"} {
			if _, err := SubmitDispute(st, Submission{CustomerID: who, Message: "x"}, now); !errors.Is(err, ErrVaultNotDisputable) {
				t.Errorf("%s dispute by %s: %v", st.Status, who, err)
			}
		}
		amt := money.Naira(1000)
		if _, err := Resolve(st, Resolution{Status: "SPLIT", SellerAmount: &amt, BuyerAmount: &amt}, now); !errors.Is(err, ErrNotUnderDispute) {
			t.Errorf("%s split: %v", st.Status, err)
		}
	}
}

// For random vaults, create then winner or cancel leaves every stake's
// escrow balance at zero, pays out exactly the pot, and sums to zero.
func TestVaultConservesMoney(t *testing.T) {
	rng := rand.New(rand.NewPCG(20261127, 3))
	for i := 0; i < 1000; i++ {
		n := 2 + rng.IntN(10)
		var ss []Stake
		for j := 0; j < n; j++ {
			ss = append(ss, Stake{CustomerID: string(rune('a' + j)), Amount: money.Naira(1 + rng.Int64N(100_000))})
		}
		ss[0].Amount += money.Naira(1000)
		fees := FeeTerms{EscrowFeeBps: rng.Int64N(10_001), CommissionBps: rng.Int64N(10_001)}
		created := newVault(t, fees, ss)
		s := fold(created)
		var settled VaultSettled
		if rng.IntN(2) == 0 {
			settled = mustWin(t, s, ss[rng.IntN(n)].CustomerID)
		} else {
			settled = mustCancel(t, s)
		}
		deltas := map[ledger.Account]money.Amount{}
		for _, m := range []ledger.Movement{created.Movement, settled.Movement} {
			if len(m.Postings) > 0 {
				checkBalanced(t, m)
			}
			for acc, d := range m.Deltas() {
				deltas[acc] += d
			}
		}
		var paid money.Amount
		for _, p := range ss {
			if d := deltas[ledger.CustomerEscrow(p.CustomerID)]; d != 0 {
				t.Fatalf("escrow of %s left at %s", p.CustomerID, d)
			}
			paid += deltas[ledger.CustomerMain(p.CustomerID)]
		}
		commission := Commission(s.Fee, fees.CommissionBps)
		if deltas[merchantMain] != commission || deltas[platform] != s.Fee-commission || paid != -s.Fee {
			t.Fatalf("vault %v at %+v: merchant %s platform %s participants %s, fee %s", ss, fees, deltas[merchantMain],
				deltas[platform], paid, s.Fee)
		}
	}
}
