// Package money is exact naira arithmetic: amounts are whole kobo in an
// int64, parsed from decimal text without ever passing through a float.
package money

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
)

// Amount is a sum of money in kobo (1 naira = 100 kobo).
type Amount int64

// Max is the largest amount the service accepts in a request: 100 billion
// naira. Keeping inputs far below the int64 range means sums of many
// amounts (balances, pools) cannot overflow.
const Max Amount = 100_000_000_000 * 100

// Naira returns n whole naira.
func Naira(n int64) Amount { return Amount(n * 100) }

// Kobo returns the amount in kobo.
func (a Amount) Kobo() int64 { return int64(a) }

// String renders the amount as naira with at most 2 decimals: 1500 kobo is
// "15", 1550 is "15.5", 1505 is "15.05".
func (a Amount) String() string {
	neg := a < 0
	u := uint64(a)
	if neg {
		u = uint64(-a)
	}
	s := strconv.FormatUint(u/100, 10)
	if frac := u % 100; frac != 0 {
		f := strconv.FormatUint(frac+100, 10)[1:] // two digits
		s += "." + strings.TrimSuffix(f, "0")
	}
	if neg {
		s = "-" + s
	}
	return s
}

// MarshalJSON writes the amount as a JSON number in naira.
func (a Amount) MarshalJSON() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalJSON reads what MarshalJSON writes (stored events, tests).
func (a *Amount) UnmarshalJSON(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// Errors of Parse.
var (
	ErrSyntax    = errors.New("money: not a decimal number")
	ErrPrecision = errors.New("money: more than 2 decimal places")
	ErrRange     = errors.New("money: out of range")
)

// Parse reads a decimal amount of naira: an optional minus sign, digits, and
// at most 2 decimal places ("1000", "1000.5", "0.05"). Exponents, leading
// "+", whitespace, more than 2 decimals (even trailing zeros: "1.000" is a
// precision error, so a client never learns its third decimal was dropped)
// and amounts beyond Max are refused.
func Parse(s string) (Amount, error) {
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	whole, frac, hasDot := strings.Cut(s, ".")
	if whole == "" || !digits(whole) || (hasDot && (frac == "" || !digits(frac))) {
		return 0, ErrSyntax
	}
	if len(frac) > 2 {
		return 0, ErrPrecision
	}
	whole = strings.TrimLeft(whole, "0")
	if len(whole) > 12 { // beyond Max naira; also keeps ParseUint in range
		return 0, ErrRange
	}
	var n uint64
	if whole != "" {
		n, _ = strconv.ParseUint(whole, 10, 64)
	}
	k := n * 100
	if frac != "" {
		f, _ := strconv.ParseUint((frac + "0")[:2], 10, 64)
		k += f
	}
	if Amount(k) > Max {
		return 0, ErrRange
	}
	if neg {
		return -Amount(k), nil
	}
	return Amount(k), nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// Input is a money field of a request body as the client sent it. Decoding
// never fails, so the handler can report a rule-specific message for the
// field instead of a generic type error.
type Input struct {
	raw []byte
}

// UnmarshalJSON keeps the raw token.
func (in *Input) UnmarshalJSON(b []byte) error {
	in.raw = append([]byte(nil), b...)
	return nil
}

// Present reports whether the field was sent (and not null).
func (in Input) Present() bool {
	return len(in.raw) > 0 && !bytes.Equal(in.raw, []byte("null"))
}

// Decimal parses the field as an amount with at most 2 decimals. A JSON
// number or a string holding one are accepted ("1500.50" as well as 1500.50).
func (in Input) Decimal() (Amount, error) {
	if !in.Present() {
		return 0, ErrSyntax
	}
	raw := in.raw
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, ErrSyntax
		}
		raw = []byte(s)
	}
	return Parse(string(raw))
}

// Integer parses the field as a whole number of naira (the spec's integer
// money fields: escrow amount, additionalFee, stakes).
func (in Input) Integer() (Amount, error) {
	a, err := in.Decimal()
	if err != nil {
		return 0, err
	}
	if a%100 != 0 {
		return 0, ErrPrecision
	}
	return a, nil
}

// InputOf builds an Input from a literal (tests, internal callers).
func InputOf(raw string) Input { return Input{raw: []byte(raw)} }

// Percent returns bps basis points of a, rounded half-up to the unit
// (unit 100 rounds to whole naira, 1 to the kobo). Amounts are non-negative.
func (a Amount) Percent(bps int64, unit Amount) Amount {
	// a*bps fits: a <= Max (1e13) and bps <= 10_000 gives 1e17 < 9.2e18.
	num := int64(a) * bps
	den := int64(10_000) * int64(unit)
	q := (num + den/2) / den
	return Amount(q * int64(unit))
}
