package money

import (
	"encoding/json"
	"errors"
	"math/big"
	"regexp"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    Amount
		wantErr error
	}{
		{in: "0", want: 0},
		{in: "1000", want: 100_000},
		{in: "1000.5", want: 100_050},
		{in: "1000.50", want: 100_050},
		{in: "0.05", want: 5},
		{in: "0.5", want: 50},
		{in: "-3.2", want: -320},
		{in: "-0", want: 0},
		{in: "000123.4", want: 12_340},
		{in: "100000000000", want: Max},        // exactly Max: 12 digits
		{in: "-100000000000", want: -Max},      // and its negative
		{in: "0000000000000000001", want: 100}, // leading zeros do not count as digits

		{in: "", wantErr: ErrSyntax},
		{in: "-", wantErr: ErrSyntax},
		{in: "--1", wantErr: ErrSyntax},
		{in: ".5", wantErr: ErrSyntax},
		{in: "-.5", wantErr: ErrSyntax},
		{in: "1.", wantErr: ErrSyntax},
		{in: "1..0", wantErr: ErrSyntax},
		{in: "1.2.3", wantErr: ErrSyntax},
		{in: "1e3", wantErr: ErrSyntax},
		{in: "1E3", wantErr: ErrSyntax},
		{in: "+1", wantErr: ErrSyntax},
		{in: " 1", wantErr: ErrSyntax},
		{in: "1 ", wantErr: ErrSyntax},
		{in: "1,000", wantErr: ErrSyntax},
		{in: "0x10", wantErr: ErrSyntax},
		{in: "١٢", wantErr: ErrSyntax}, // Arabic-Indic digits
		{in: "NaN", wantErr: ErrSyntax},
		{in: "Infinity", wantErr: ErrSyntax},
		{in: `"1"`, wantErr: ErrSyntax},
		{in: "1.234", wantErr: ErrPrecision},
		{in: "1.000", wantErr: ErrPrecision},
		{in: "-0.001", wantErr: ErrPrecision},
		{in: "100000000000.01", wantErr: ErrRange},  // Max + 1 kobo
		{in: "-100000000000.01", wantErr: ErrRange}, // -(Max + 1 kobo)
		{in: "999999999999", wantErr: ErrRange},     // 12 digits, above Max
		{in: "1000000000000", wantErr: ErrRange},    // 13 digits
		{in: "99999999999999999999999", wantErr: ErrRange},
		{in: "-99999999999999999999999.99", wantErr: ErrRange},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Parse(tt.in)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Parse(%q) = %d, %v; want %v", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Parse(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	tests := []struct {
		in   Amount
		want string
	}{
		{0, "0"},
		{150_000, "1500"},
		{1500, "15"},
		{1550, "15.5"},
		{1505, "15.05"},
		{5, "0.05"},
		{50, "0.5"},
		{99, "0.99"},
		{Max, "100000000000"},
		{-150_000, "-1500"},
		{-1550, "-15.5"},
		{-1505, "-15.05"},
		{-5, "-0.05"},
		{Naira(7), "7"},
	}
	for _, tt := range tests {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("Amount(%d).String() = %q, want %q", int64(tt.in), got, tt.want)
		}
		if got, err := Parse(tt.want); err != nil || got != tt.in {
			t.Errorf("Parse(%q) = %d, %v; want %d", tt.want, got, err, int64(tt.in))
		}
	}
}

func TestJSON(t *testing.T) {
	type body struct {
		Amount Amount  `json:"amount"`
		Fee    Amount  `json:"fee"`
		Ptr    *Amount `json:"ptr,omitempty"`
	}
	neg := Amount(-5)
	in := body{Amount: 1505, Fee: 0, Ptr: &neg}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"amount":15.05,"fee":0,"ptr":-0.05}` {
		t.Fatalf("marshal: %s", b)
	}
	var out body
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Amount != in.Amount || out.Fee != in.Fee || out.Ptr == nil || *out.Ptr != neg {
		t.Fatalf("round trip: %+v", out)
	}
	for _, a := range []Amount{0, 1, 5, 50, 99, 100, 1505, 1550, 150_000, Max, -1, -1505, -Max} {
		b, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		var back Amount
		if err := json.Unmarshal(b, &back); err != nil || back != a {
			t.Fatalf("%d -> %s -> %d, %v", int64(a), b, int64(back), err)
		}
	}
	// Stored events hold plain numbers with at most 2 decimals; anything
	// else is refused rather than rounded.
	for _, bad := range []string{`1.005`, `1e3`, `"15"`, `true`} {
		var a Amount
		if err := json.Unmarshal([]byte(bad), &a); err == nil {
			t.Errorf("Unmarshal(%s) = %d, want an error", bad, int64(a))
		}
	}
}

func TestInput(t *testing.T) {
	tests := []struct {
		name       string
		body       string // the request body; the field is "amount"
		present    bool
		decimal    Amount
		decimalErr error
		integer    Amount
		integerErr error
	}{
		{name: "integer number", body: `{"amount":1500}`, present: true, decimal: 150_000, integer: 150_000},
		{name: "decimal number", body: `{"amount":1500.50}`, present: true, decimal: 150_050, integerErr: ErrPrecision},
		{name: "one decimal", body: `{"amount":1500.5}`, present: true, decimal: 150_050, integerErr: ErrPrecision},
		{name: "whole number with zero decimals", body: `{"amount":1500.00}`, present: true, decimal: 150_000, integer: 150_000},
		{name: "numeric string", body: `{"amount":"1500.50"}`, present: true, decimal: 150_050, integerErr: ErrPrecision},
		{name: "integer string", body: `{"amount":"1500"}`, present: true, decimal: 150_000, integer: 150_000},
		{name: "escaped string", body: `{"amount":"\u0031\u0032"}`, present: true, decimal: 1200, integer: 1200},
		{name: "negative number", body: `{"amount":-3.2}`, present: true, decimal: -320, integerErr: ErrPrecision},
		{name: "three decimals", body: `{"amount":1.234}`, present: true, decimalErr: ErrPrecision, integerErr: ErrPrecision},
		{name: "exponent", body: `{"amount":1e3}`, present: true, decimalErr: ErrSyntax, integerErr: ErrSyntax},
		{name: "too large", body: `{"amount":1000000000000}`, present: true, decimalErr: ErrRange, integerErr: ErrRange},
		{name: "empty string", body: `{"amount":""}`, present: true, decimalErr: ErrSyntax, integerErr: ErrSyntax},
		{name: "padded string", body: `{"amount":" 15"}`, present: true, decimalErr: ErrSyntax, integerErr: ErrSyntax},
		{name: "null", body: `{"amount":null}`, decimalErr: ErrSyntax, integerErr: ErrSyntax},
		{name: "missing", body: `{}`, decimalErr: ErrSyntax, integerErr: ErrSyntax},
		{name: "bool", body: `{"amount":true}`, present: true, decimalErr: ErrSyntax, integerErr: ErrSyntax},
		{name: "object", body: `{"amount":{"value":1}}`, present: true, decimalErr: ErrSyntax, integerErr: ErrSyntax},
		{name: "array", body: `{"amount":[1]}`, present: true, decimalErr: ErrSyntax, integerErr: ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req struct {
				Amount Input `json:"amount"`
			}
			if err := json.Unmarshal([]byte(tt.body), &req); err != nil {
				t.Fatalf("decoding must never fail: %v", err)
			}
			in := req.Amount
			if in.Present() != tt.present {
				t.Fatalf("Present() = %v, want %v", in.Present(), tt.present)
			}
			d, err := in.Decimal()
			if tt.decimalErr != nil {
				if !errors.Is(err, tt.decimalErr) {
					t.Fatalf("Decimal() = %d, %v; want %v", d, err, tt.decimalErr)
				}
			} else if err != nil || d != tt.decimal {
				t.Fatalf("Decimal() = %d, %v; want %d", d, err, tt.decimal)
			}
			i, err := in.Integer()
			if tt.integerErr != nil {
				if !errors.Is(err, tt.integerErr) {
					t.Fatalf("Integer() = %d, %v; want %v", i, err, tt.integerErr)
				}
			} else if err != nil || i != tt.integer {
				t.Fatalf("Integer() = %d, %v; want %d", i, err, tt.integer)
			}
		})
	}
	if in := InputOf("250"); !in.Present() {
		t.Fatal("InputOf: not present")
	} else if a, err := in.Integer(); err != nil || a != Naira(250) {
		t.Fatalf("InputOf(250).Integer() = %d, %v", a, err)
	}
}

func TestPercent(t *testing.T) {
	const toNaira, toKobo = Amount(100), Amount(1)
	tests := []struct {
		name string
		a    Amount
		bps  int64
		unit Amount
		want Amount
	}{
		{name: "2.5% of 10,000 to naira", a: Naira(10_000), bps: 250, unit: toNaira, want: Naira(250)},
		{name: "2.5% of 10,000 to kobo", a: Naira(10_000), bps: 250, unit: toKobo, want: Naira(250)},
		{name: "2.5% of 20 to naira: exact half rounds up", a: Naira(20), bps: 250, unit: toNaira, want: Naira(1)},
		{name: "2.5% of 20 to kobo", a: Naira(20), bps: 250, unit: toKobo, want: 50},
		{name: "2.5% of 19.99 to naira: just under half rounds down", a: 1999, bps: 250, unit: toNaira, want: 0},
		{name: "2.5% of 20.01 to kobo: 50.025 kobo rounds down", a: 2001, bps: 250, unit: toKobo, want: 50},
		{name: "2.5% of 1,010 to naira: 25.25 rounds down", a: Naira(1010), bps: 250, unit: toNaira, want: Naira(25)},
		{name: "2.5% of 1,030 to naira: 25.75 rounds up", a: Naira(1030), bps: 250, unit: toNaira, want: Naira(26)},
		{name: "2.5% of 1,020 to naira: 25.5 rounds up", a: Naira(1020), bps: 250, unit: toNaira, want: Naira(26)},
		{name: "2.5% of 0.2 to kobo: exact half kobo rounds up", a: 20, bps: 250, unit: toKobo, want: 1},
		{name: "2.5% of 0.19 to kobo: 0.475 kobo rounds down", a: 19, bps: 250, unit: toKobo, want: 0},
		{name: "50% of 25 naira to kobo", a: Naira(25), bps: 5000, unit: toKobo, want: 1250},
		{name: "50% of 0.03 to kobo: 1.5 kobo rounds up", a: 3, bps: 5000, unit: toKobo, want: 2},
		{name: "50% of 0.01 to kobo: half a kobo rounds up", a: 1, bps: 5000, unit: toKobo, want: 1},
		{name: "50% of 3 naira to naira: 1.5 rounds up", a: Naira(3), bps: 5000, unit: toNaira, want: Naira(2)},
		{name: "50% of 2.99 to naira: 1.495 rounds down", a: 299, bps: 5000, unit: toNaira, want: Naira(1)},
		{name: "0%", a: Naira(1000), bps: 0, unit: toKobo, want: 0},
		{name: "100%", a: 12_345, bps: 10_000, unit: toKobo, want: 12_345},
		{name: "100% to naira", a: 12_345, bps: 10_000, unit: toNaira, want: 12_300},
		{name: "of zero", a: 0, bps: 250, unit: toNaira, want: 0},
		{name: "100% of Max does not overflow", a: Max, bps: 10_000, unit: toKobo, want: Max},
		{name: "2.5% of Max", a: Max, bps: 250, unit: toNaira, want: Max / 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a.Percent(tt.bps, tt.unit); got != tt.want {
				t.Fatalf("%s.Percent(%d, %d) = %s, want %s", tt.a, tt.bps, tt.unit, got, tt.want)
			}
		})
	}
}

// TestPercentAgainstRat checks Percent against exact rational arithmetic on
// a grid of amounts: the result is a multiple of unit and the nearest one to
// a*bps/10000, ties going up.
func TestPercentAgainstRat(t *testing.T) {
	for _, unit := range []Amount{1, 100} {
		for _, bps := range []int64{1, 250, 333, 5000, 9999, 10_000} {
			for a := Amount(0); a < 5000; a += 7 {
				got := a.Percent(bps, unit)
				if got%unit != 0 {
					t.Fatalf("%d.Percent(%d, %d) = %d: not a multiple of the unit", a, bps, unit, got)
				}
				exact := new(big.Rat).SetFrac64(int64(a)*bps, 10_000*int64(unit)) // in units
				// floor(exact + 1/2)
				half := new(big.Rat).Add(exact, big.NewRat(1, 2))
				q := new(big.Int).Quo(half.Num(), half.Denom())
				if want := Amount(q.Int64()) * unit; got != want {
					t.Fatalf("%d.Percent(%d, %d) = %d, want %d", a, bps, unit, got, want)
				}
			}
		}
	}
}

var plain = regexp.MustCompile(`^-?[0-9]+(\.[0-9]{1,2})?$`)

// FuzzParse checks Parse against exact rational parsing: it never panics,
// what it accepts is plain decimal text with the value big.Rat reads, its
// String parses back to itself, and every plain decimal text with at most 2
// decimals within range is accepted.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"0", "1000", "1000.5", "1000.50", "0.05", "-3.2", "000123.4", "-0", "100000000000",
		"100000000000.01", "999999999999.99", "-100000000000", "", "-", ".5", "1.", "1e3", "+1",
		" 1", "1,000", "1.234", "1.000", "0x10", "1/2", "00000000000000000000001", "18446744073709551616",
	} {
		f.Add(s)
	}
	hundred := big.NewRat(100, 1)
	maxKobo := big.NewInt(int64(Max))
	f.Fuzz(func(t *testing.T, s string) {
		a, err := Parse(s)
		if err == nil {
			if a > Max || a < -Max {
				t.Fatalf("Parse(%q) = %d: beyond Max", s, a)
			}
			if !plain.MatchString(s) {
				t.Fatalf("Parse(%q) accepted text that is not a plain decimal", s)
			}
			str := a.String()
			if !plain.MatchString(str) {
				t.Fatalf("Amount(%d).String() = %q: not a plain decimal with at most 2 decimals", a, str)
			}
			if back, err := Parse(str); err != nil || back != a {
				t.Fatalf("Parse(%q) = %d; Parse(String() = %q) = %d, %v", s, a, str, back, err)
			}
			if strings.Contains(str, ".") && strings.HasSuffix(str, "0") {
				t.Fatalf("String() = %q has a trailing zero decimal", str)
			}
		}

		// big.Rat expands exponents exactly ("1e9000000" takes seconds), and
		// no text with one is plain decimal: Parse refusing it is checked above.
		if strings.ContainsAny(s, "eEpP") {
			if err == nil {
				t.Fatalf("Parse(%q) accepted an exponent", s)
			}
			return
		}
		r, ok := new(big.Rat).SetString(s)
		if !ok {
			if err == nil {
				t.Fatalf("Parse(%q) = %d but big.Rat refuses the text", s, a)
			}
			return
		}
		kobo := new(big.Rat).Mul(r, hundred)
		exact := kobo.IsInt() && new(big.Int).Abs(kobo.Num()).Cmp(maxKobo) <= 0
		if err == nil {
			if !exact || kobo.Num().Int64() != int64(a) {
				t.Fatalf("Parse(%q) = %d kobo, big.Rat reads %s kobo", s, a, kobo.RatString())
			}
			return
		}
		if exact && plain.MatchString(s) {
			t.Fatalf("Parse(%q) = %v, want %s kobo", s, err, kobo.RatString())
		}
	})
}
