package ledger

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/money"
)

func movement(postings ...Posting) Movement {
	return Movement{MerchantID: "m1", Environment: domain.Test, Postings: postings}
}

func TestValidate(t *testing.T) {
	n := money.Naira(100)
	tests := []struct {
		name  string
		m     Movement
		valid bool
	}{
		{name: "deposit: clearing to customer main", m: movement(Posting{ExternalClearing("m1"), CustomerMain("c1"), n}), valid: true},
		{name: "customer to customer", m: movement(Posting{CustomerMain("c1"), CustomerMain("c2"), n}), valid: true},
		{name: "customer main to own escrow", m: movement(Posting{CustomerMain("c1"), CustomerEscrow("c1"), n}), valid: true},
		{name: "settlement legs", m: movement(
			Posting{CustomerEscrow("c1"), CustomerMain("c2"), n},
			Posting{CustomerEscrow("c1"), MerchantMain("m1"), 125},
			Posting{CustomerEscrow("c1"), PlatformRevenue("m1"), 125},
			Posting{MerchantEscrow("m1"), MerchantMain("m1"), 1},
		), valid: true},
		{name: "amount of exactly Max", m: movement(Posting{ExternalClearing("m1"), CustomerMain("c1"), money.Max}), valid: true},
		{name: "live environment", m: Movement{MerchantID: "m1", Environment: domain.Live,
			Postings: []Posting{{CustomerMain("c1"), ExternalClearing("m1"), n}}}, valid: true},
		{name: "no postings", m: movement(), valid: true},

		{name: "zero amount", m: movement(Posting{ExternalClearing("m1"), CustomerMain("c1"), 0})},
		{name: "negative amount", m: movement(Posting{ExternalClearing("m1"), CustomerMain("c1"), -1})},
		{name: "amount beyond Max", m: movement(Posting{ExternalClearing("m1"), CustomerMain("c1"), money.Max + 1})},
		{name: "posting to itself", m: movement(Posting{CustomerMain("c1"), CustomerMain("c1"), n})},
		{name: "merchant account to itself", m: movement(Posting{MerchantMain("m1"), MerchantMain("m1"), n})},
		{name: "one bad posting among good ones", m: movement(
			Posting{ExternalClearing("m1"), CustomerMain("c1"), n},
			Posting{CustomerMain("c1"), CustomerMain("c2"), 0},
		)},
		{name: "another merchant's main", m: movement(Posting{CustomerMain("c1"), MerchantMain("m2"), n})},
		{name: "another merchant's escrow", m: movement(Posting{MerchantEscrow("m2"), CustomerMain("c1"), n})},
		{name: "another merchant's platform revenue", m: movement(Posting{CustomerMain("c1"), PlatformRevenue("m2"), n})},
		{name: "another merchant's clearing", m: movement(Posting{ExternalClearing("m2"), CustomerMain("c1"), n})},
		{name: "missing merchant", m: Movement{Environment: domain.Test, Postings: []Posting{{ExternalClearing(""), CustomerMain("c1"), n}}}},
		{name: "missing environment", m: Movement{MerchantID: "m1", Postings: []Posting{{ExternalClearing("m1"), CustomerMain("c1"), n}}}},
		{name: "unknown environment", m: Movement{MerchantID: "m1", Environment: "prod", Postings: []Posting{{ExternalClearing("m1"), CustomerMain("c1"), n}}}},
		{name: "missing merchant, no postings", m: Movement{Environment: domain.Test}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.m.Validate()
			if tt.valid {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrUnbalanced) {
				t.Fatalf("Validate() = %v, want ErrUnbalanced", err)
			}
		})
	}
}

func TestMayGoNegative(t *testing.T) {
	for _, a := range []Account{CustomerMain("c1"), CustomerEscrow("c1"), MerchantMain("m1"), MerchantEscrow("m1"), PlatformRevenue("m1")} {
		if a.MayGoNegative() {
			t.Errorf("%s may go negative", a)
		}
	}
	if !ExternalClearing("m1").MayGoNegative() {
		t.Error("clearing may not go negative")
	}
}

func TestDeltas(t *testing.T) {
	m := movement(
		Posting{CustomerMain("c1"), CustomerEscrow("c1"), 10_250},
		Posting{CustomerEscrow("c1"), CustomerMain("c2"), 9_750},
		Posting{CustomerEscrow("c1"), PlatformRevenue("m1"), 250},
		Posting{CustomerEscrow("c1"), MerchantMain("m1"), 250},
	)
	want := map[Account]money.Amount{
		CustomerMain("c1"):    -10_250,
		CustomerEscrow("c1"):  0,
		CustomerMain("c2"):    9_750,
		PlatformRevenue("m1"): 250,
		MerchantMain("m1"):    250,
	}
	if got := m.Deltas(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Deltas() = %v\nwant %v", got, want)
	}
	if got := movement().Deltas(); len(got) != 0 {
		t.Fatalf("empty movement: %v", got)
	}
}

// randomMovement builds a valid movement of 1 to 8 postings between the
// accounts of one merchant and three customers.
func randomMovement(rng *rand.Rand) Movement {
	accounts := []Account{
		CustomerMain("c1"), CustomerEscrow("c1"), CustomerMain("c2"), CustomerEscrow("c2"), CustomerMain("c3"),
		MerchantMain("m1"), MerchantEscrow("m1"), PlatformRevenue("m1"), ExternalClearing("m1"),
	}
	m := movement()
	for range 1 + rng.IntN(8) {
		i := rng.IntN(len(accounts))
		j := (i + 1 + rng.IntN(len(accounts)-1)) % len(accounts) // any other account
		m.Move(accounts[i], accounts[j], money.Amount(1+rng.Int64N(int64(money.Max))))
	}
	return m
}

func sum(d map[Account]money.Amount) money.Amount {
	var s money.Amount
	for _, v := range d {
		s += v
	}
	return s
}

// Every movement conserves money, and its reverse undoes it exactly.
func TestDeltasPropertySumToZeroAndReverseUndoes(t *testing.T) {
	rng := rand.New(rand.NewPCG(2026, 11))
	for i := range 2000 {
		m := randomMovement(rng)
		if err := m.Validate(); err != nil {
			t.Fatalf("#%d: generated an invalid movement: %v", i, err)
		}
		d := m.Deltas()
		if s := sum(d); s != 0 {
			t.Fatalf("#%d: deltas of %+v sum to %d", i, m, s)
		}
		r := m.Reverse()
		if err := r.Validate(); err != nil {
			t.Fatalf("#%d: reverse invalid: %v", i, err)
		}
		if r.MerchantID != m.MerchantID || r.Environment != m.Environment || len(r.Postings) != len(m.Postings) {
			t.Fatalf("#%d: reverse %+v of %+v", i, r, m)
		}
		rd := r.Deltas()
		if s := sum(rd); s != 0 {
			t.Fatalf("#%d: reverse deltas sum to %d", i, s)
		}
		for a, v := range d {
			if rd[a] != -v {
				t.Fatalf("#%d: %s moved %d, reverse moved %d", i, a, v, rd[a])
			}
		}
		if len(rd) != len(d) {
			t.Fatalf("#%d: reverse touches %d accounts, movement %d", i, len(rd), len(d))
		}
		if !reflect.DeepEqual(r.Reverse(), m) {
			t.Fatalf("#%d: reversing twice is not the movement", i)
		}
	}
}

func TestReverse(t *testing.T) {
	m := movement(
		Posting{CustomerMain("c1"), ExternalClearing("m1"), 10_000},
		Posting{CustomerMain("c1"), PlatformRevenue("m1"), 5_000},
	)
	want := movement(
		Posting{PlatformRevenue("m1"), CustomerMain("c1"), 5_000},
		Posting{ExternalClearing("m1"), CustomerMain("c1"), 10_000},
	)
	if got := m.Reverse(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Reverse() = %+v\nwant %+v", got, want)
	}
	if got := movement().Reverse(); got.MerchantID != "m1" || got.Environment != domain.Test || len(got.Postings) != 0 {
		t.Fatalf("empty reverse: %+v", got)
	}
}

func TestMove(t *testing.T) {
	m := movement()
	m.Move(CustomerMain("c1"), ExternalClearing("m1"), 10_000)
	m.Move(CustomerMain("c1"), PlatformRevenue("m1"), 0) // a zero fee
	m.Move(CustomerMain("c1"), MerchantMain("m1"), 1)
	want := []Posting{
		{CustomerMain("c1"), ExternalClearing("m1"), 10_000},
		{CustomerMain("c1"), MerchantMain("m1"), 1},
	}
	if !reflect.DeepEqual(m.Postings, want) {
		t.Fatalf("postings %+v\nwant %+v", m.Postings, want)
	}
	var empty Movement
	empty.Move(CustomerMain("c1"), ExternalClearing("m1"), 0)
	if empty.Postings != nil {
		t.Fatalf("zero move appended %+v", empty.Postings)
	}
}

func TestCustomers(t *testing.T) {
	tests := []struct {
		name string
		m    Movement
		want []string
	}{
		{name: "none", m: movement(Posting{MerchantEscrow("m1"), MerchantMain("m1"), 1})},
		{name: "empty movement", m: movement()},
		{name: "first-seen order, from before to, deduplicated", m: movement(
			Posting{CustomerEscrow("c2"), CustomerMain("c1"), 1},
			Posting{CustomerEscrow("c2"), PlatformRevenue("m1"), 1},
			Posting{ExternalClearing("m1"), CustomerMain("c3"), 1},
			Posting{CustomerMain("c1"), CustomerEscrow("c2"), 1},
			Posting{CustomerMain("c3"), CustomerMain("c4"), 1},
		), want: []string{"c2", "c1", "c3", "c4"}},
		{name: "merchant ids are not customers even when equal", m: movement(
			Posting{MerchantMain("c1"), CustomerMain("c9"), 1},
		), want: []string{"c9"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.m.Customers(); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Customers() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestValidReference(t *testing.T) {
	tests := []struct {
		name    string
		ref     string
		wantErr string
	}{
		{name: "simple", ref: "ref-001"},
		{name: "inner spaces", ref: "order 42 / retry"},
		{name: "unicode", ref: "réf-ñ-日本"},
		{name: "exactly 100", ref: strings.Repeat("r", 100)},
		{name: "100 multi-byte characters", ref: strings.Repeat("é", 100)},
		{name: "surrounding spaces", ref: " r "},
		{name: "empty", ref: "", wantErr: "reference is required"},
		{name: "blank", ref: "   ", wantErr: "reference is required"},
		{name: "whitespace controls only", ref: "\t\n", wantErr: "reference is required"},
		{name: "101", ref: strings.Repeat("r", 101), wantErr: "reference must be at most 100 characters"},
		{name: "101 multi-byte characters", ref: strings.Repeat("é", 101), wantErr: "reference must be at most 100 characters"},
		{name: "newline", ref: "a\nb", wantErr: "reference must not contain control characters"},
		{name: "tab", ref: "a\tb", wantErr: "reference must not contain control characters"},
		{name: "NUL", ref: "a\x00", wantErr: "reference must not contain control characters"},
		{name: "unit separator", ref: "a\x1f", wantErr: "reference must not contain control characters"},
		{name: "DEL", ref: "a\x7f", wantErr: "reference must not contain control characters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidReference(tt.ref)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidReference(%q) = %v", tt.ref, err)
				}
				return
			}
			if err == nil || domain.ErrorMessage(err) != tt.wantErr || domain.ErrorCode(err) != domain.Invalid {
				t.Fatalf("ValidReference(%q) = %v, want 400 %q", tt.ref, err, tt.wantErr)
			}
		})
	}
}

// TestValidClientReference: a client's reference may not begin with a
// prefix the service's own references use, in any case.
func TestValidClientReference(t *testing.T) {
	for ref, want := range map[string]string{
		"order-1": "", "checkout": "", "TOPUP": "", "my-checkout_1": "", "WTF-1": "",
		"checkout_01a2": "Reference prefix is reserved", "CHECKOUT_x": "Reference prefix is reserved",
		"TOPUP-1": "Reference prefix is reserved", "topup-1": "Reference prefix is reserved",
		"WT-01a2": "Reference prefix is reserved", "ESC-1-fee": "Reference prefix is reserved",
		"": "reference is required",
	} {
		err := ValidClientReference(ref)
		got := ""
		if err != nil {
			got = domain.ErrorMessage(err)
		}
		if got != want || (err != nil && domain.ErrorCode(err) != domain.Invalid) {
			t.Errorf("ValidClientReference(%q) = %v, want %q", ref, err, want)
		}
	}
}

func TestStatusSettled(t *testing.T) {
	tests := []struct {
		s    Status
		want bool
	}{
		{Pending, false},
		{Success, true},
		{Failed, true},
		{Reversed, true},
		{"", false},
		{"unknown", false},
	}
	for _, tt := range tests {
		if got := tt.s.Settled(); got != tt.want {
			t.Errorf("%q.Settled() = %v, want %v", tt.s, got, tt.want)
		}
	}
}

func TestFundedEscrowDetails(t *testing.T) {
	a, b := money.Naira(10000), money.Naira(250)
	one := EscrowSummary{PaymentToken: "PT_A", Purpose: "Phone", Amount: &a, Fee: &b, Beneficiary: &Beneficiary{Name: "Ada Obi", Phone: "0803"}}
	two := EscrowSummary{PaymentToken: "PT_B", Purpose: "Case", Amount: &a, Fee: &b, Beneficiary: &Beneficiary{Name: "Shop"}}
	for _, tc := range []struct {
		name      string
		summaries []EscrowSummary
		want      string
	}{
		{"one escrow: flat", []EscrowSummary{one},
			`{"escrowIds":["e1"],"paymentTokens":["PT_A"],"paymentToken":"PT_A","purpose":"Phone","amount":10000,"fee":250,"beneficiary":{"name":"Ada Obi","phone":"0803"}}`},
		{"several: escrows", []EscrowSummary{one, two},
			`{"escrowIds":["e1","e2"],"paymentTokens":["PT_A","PT_B"],"escrows":[` +
				`{"paymentToken":"PT_A","purpose":"Phone","amount":10000,"fee":250,"beneficiary":{"name":"Ada Obi","phone":"0803"}},` +
				`{"paymentToken":"PT_B","purpose":"Case","amount":10000,"fee":250,"beneficiary":{"name":"Shop","phone":""}}]}`},
	} {
		ids, tokens := []string{"e1", "e2"}[:len(tc.summaries)], []string{"PT_A", "PT_B"}[:len(tc.summaries)]
		got, err := json.Marshal(FundedEscrowDetails(ids, tokens, tc.summaries))
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: %s %v\nwant %s", tc.name, got, err, tc.want)
		}
	}
	// Details written before (ids and tokens only) read as they were.
	if got, _ := json.Marshal(EscrowDetails{EscrowIDs: []string{"e1"}}); string(got) != `{"escrowIds":["e1"]}` {
		t.Errorf("old details %s", got)
	}
}

// FuzzValidClientReference: an accepted client reference is a valid
// reference that begins with no reserved prefix, in any case.
func FuzzValidClientReference(f *testing.F) {
	for _, s := range []string{"order-1", "checkout_x", "TopUp-1", "wt-", "ESC-1", "é", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		if ValidClientReference(ref) != nil {
			return
		}
		if ValidReference(ref) != nil {
			t.Fatalf("%q accepted but not a valid reference", ref)
		}
		for _, p := range ReservedPrefixes {
			if strings.HasPrefix(strings.ToUpper(ref), strings.ToUpper(p)) {
				t.Fatalf("%q accepted with reserved prefix %q", ref, p)
			}
		}
	})
}
