package reference

import (
	"fmt"
	"strings"
	"testing"
)

// Worked examples, computed by hand with the CBN weights.
//
// GTBank "058", serial 012345678 (3-digit code: 12 digits, 3,7,3,3,7,3,...):
//
//	digits  0  5  8  0  1  2  3  4  5  6  7  8
//	weights 3  7  3  3  7  3  3  7  3  3  7  3
//	        0+35+24 +0 +7 +6 +9+28+15+18+49+24 = 215
//	check = (10 - 215%10) % 10 = 5  ->  0123456785
//
// Kuda "090267", serial 200012345 (6-digit code: 15 digits):
//
//	digits  0  9  0  2  6  7  2  0  0  0  1  2  3  4  5
//	weights 3  7  3  3  7  3  3  7  3  3  7  3  3  7  3
//	        0+63 +0 +6+42+21 +6 +0 +0 +0 +7 +6 +9+28+15 = 203
//	check = (10 - 203%10) % 10 = 7  ->  2000123457
//
// OPay "100004", serial 812345678:
//
//	digits  1  0  0  0  0  4  8  1  2  3  4  5  6  7  8
//	weights 3  7  3  3  7  3  3  7  3  3  7  3  3  7  3
//	        3 +0 +0 +0 +0+12+24 +7 +6 +9+28+15+18+49+24 = 195
//	check = (10 - 195%10) % 10 = 5  ->  8123456785
//
// First Bank "011" serials 000001457 and 000000022 are the two examples in
// the CBN NUBAN proposal (sums 81 and 30, check digits 9 and 0).
func TestValidNUBAN(t *testing.T) {
	tests := []struct {
		name    string
		bank    string
		account string
		want    bool
	}{
		{"GTBank worked example", "058", "0123456785", true},
		{"First Bank CBN example 1", "011", "0000014579", true},
		{"First Bank CBN example 2 (check 10 -> 0)", "011", "0000000220", true},
		{"Access Bank", "044", "0010246780", true},
		{"Kuda worked example", "090267", "2000123457", true},
		{"OPay worked example", "100004", "8123456785", true},

		{"wrong check digit 3-digit", "058", "0123456784", false},
		{"wrong check digit 3-digit (0 vs 10)", "011", "0000000221", false},
		{"wrong check digit 6-digit", "090267", "2000123450", false},
		{"wrong check digit 6-digit OPay", "100004", "8123456786", false},
		{"valid at another bank only", "057", "0123456785", false},
		{"transposed digits", "058", "1023456785", false},

		{"9 digits", "058", "012345678", false},
		{"11 digits", "058", "01234567850", false},
		{"empty account", "058", "", false},
		{"13-digit bank+account", "058", "0580123456785", false},

		{"letter", "058", "01234567a5", false},
		{"space", "058", "012345 785", false},
		{"leading plus", "058", "+123456785", false},
		{"dash", "058", "012-345678", false},
		{"arabic-indic digits", "058", "٠١٢٣٤٥٦٧٨٥", false},
		{"fullwidth digits", "058", "０１２３４５６７８５", false},

		{"unknown 3-digit bank", "999", "0123456785", false},
		{"bank code with space", " 058", "0123456785", false},
		{"empty bank code", "", "0123456785", false},
		{"5-digit code not in Banks", "50211", "0000000019", false},
		{"6-digit padded DMB code not in Banks", "000058", "0123456785", false},
	}
	for _, tt := range tests {
		if got := ValidNUBAN(tt.bank, tt.account); got != tt.want {
			t.Errorf("%s: ValidNUBAN(%q, %q) = %v, want %v", tt.name, tt.bank, tt.account, got, tt.want)
		}
	}
}

func TestNUBANCheckDigit(t *testing.T) {
	tests := []struct {
		bank, serial string
		want         byte
		ok           bool
	}{
		{"058", "012345678", '5', true},
		{"011", "000001457", '9', true},
		{"011", "000000022", '0', true},
		{"090267", "200012345", '7', true},
		{"100004", "812345678", '5', true},
		// 5-digit OFI code: "9"+"50211" = 950211;
		// 9*3+5*7+0*3+2*3+1*7+1*3 + 1*3 = 81 -> 9.
		{"50211", "000000001", '9', true},
		// Zero serial at a zero code sums to 0: check digit 0, not 10.
		{"000", "000000000", '0', true},

		{"058", "01234567", 0, false},
		{"058", "0123456789", 0, false},
		{"058", "01234567x", 0, false},
		{"58", "012345678", 0, false},
		{"0058", "012345678", 0, false},
		{"0000058", "012345678", 0, false},
		{"05a", "012345678", 0, false},
		{"", "012345678", 0, false},
	}
	for _, tt := range tests {
		got, ok := NUBANCheckDigit(tt.bank, tt.serial)
		if got != tt.want || ok != tt.ok {
			t.Errorf("NUBANCheckDigit(%q, %q) = %q, %v; want %q, %v", tt.bank, tt.serial, got, ok, tt.want, tt.ok)
		}
	}
}

// The 2020 revision pads 3-digit bank codes to 6 digits with "000"; that
// must give the same check digit as the original 12-digit scheme.
func TestNUBANCheckDigitPaddedDMBCodeAgrees(t *testing.T) {
	for _, b := range Banks {
		if len(b.Code) != 3 {
			continue
		}
		for _, serial := range []string{"000000000", "012345678", "999999999", "123456789", "000001457"} {
			short, ok1 := NUBANCheckDigit(b.Code, serial)
			long, ok2 := NUBANCheckDigit("000"+b.Code, serial)
			if !ok1 || !ok2 || short != long {
				t.Errorf("%s %s: 3-digit %q,%v vs padded %q,%v", b.Code, serial, short, ok1, long, ok2)
			}
		}
	}
}

// Every bank in Banks has a code NUBANCheckDigit accepts, and a generated
// account validates there and nowhere it should not.
func TestValidNUBANEveryBank(t *testing.T) {
	for _, b := range Banks {
		d, ok := NUBANCheckDigit(b.Code, "123456789")
		if !ok {
			t.Errorf("bank %s (%s): code not usable for NUBAN", b.Code, b.Name)
			continue
		}
		acct := "123456789" + string(d)
		if !ValidNUBAN(b.Code, acct) {
			t.Errorf("bank %s: generated %s does not validate", b.Code, acct)
		}
	}
}

func TestTestAccountNameStable(t *testing.T) {
	// Pinned: these names are what sandbox users see; a change here means
	// the name lists or the hashing changed.
	golden := []struct{ bank, account, want string }{
		{"058", "0123456785", "UCHENNA IGBINEDION"},
		{"090267", "2000123457", "EFE OBI"},
		{"100004", "8123456785", "OLUWASEUN UMAR"},
		{"011", "0000014579", "NNAMDI BELLO"},
	}
	for _, g := range golden {
		for i := 0; i < 3; i++ {
			if got := TestAccountName(g.bank, g.account); got != g.want {
				t.Fatalf("TestAccountName(%q, %q) = %q, want %q", g.bank, g.account, got, g.want)
			}
		}
	}
}

func TestTestAccountNameShape(t *testing.T) {
	for i := 0; i < 500; i++ {
		name := TestAccountName("058", fmt.Sprintf("%010d", i))
		parts := strings.Split(name, " ")
		if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
			t.Fatalf("name %q is not FIRSTNAME LASTNAME", name)
		}
		if name != strings.ToUpper(name) || strings.Trim(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZ ") != "" {
			t.Fatalf("name %q is not upper-case ASCII letters", name)
		}
		if parts[0] == parts[1] {
			t.Fatalf("name %q repeats itself", name)
		}
	}
}

func TestTestAccountNameDistinct(t *testing.T) {
	// The bank code is part of the key, and the ":" separator keeps
	// ("05", "80123456785") apart from ("058", "0123456785").
	pairs := [][2][2]string{
		{{"058", "0123456785"}, {"057", "0123456785"}},
		{{"058", "0123456785"}, {"058", "0123456786"}},
		{{"058", "0123456785"}, {"05", "80123456785"}},
		{{"090267", "2000123457"}, {"100004", "2000123457"}},
	}
	for _, p := range pairs {
		a := TestAccountName(p[0][0], p[0][1])
		b := TestAccountName(p[1][0], p[1][1])
		if a == b {
			t.Errorf("%v and %v both named %q", p[0], p[1], a)
		}
	}
	// Over many accounts the names spread out: 1024 combinations, so 200
	// accounts should give well over 150 different names.
	seen := map[string]bool{}
	firsts := map[string]bool{}
	lasts := map[string]bool{}
	for i := 0; i < 200; i++ {
		d, _ := NUBANCheckDigit("058", fmt.Sprintf("%09d", i))
		name := TestAccountName("058", fmt.Sprintf("%09d", i)+string(d))
		seen[name] = true
		f, l, _ := strings.Cut(name, " ")
		firsts[f], lasts[l] = true, true
	}
	if len(seen) < 150 {
		t.Errorf("only %d distinct names for 200 accounts", len(seen))
	}
	if len(firsts) < len(testFirstNames)*3/4 || len(lasts) < len(testLastNames)*3/4 {
		t.Errorf("poor spread: %d first names, %d last names used", len(firsts), len(lasts))
	}
}

// FuzzValidNUBAN: ValidNUBAN never panics on any input, an account it
// accepts is 10 digits at a known bank (by its CBN or NIP code) with the
// check digit of the bank's CBN code, and for
// any 9-digit serial at any bank the generated check digit validates and
// each of the other nine digits fails.
func FuzzValidNUBAN(f *testing.F) {
	f.Add("058", "0123456785", uint32(12345678), uint8(0))
	f.Add("090267", "2000123457", uint32(200012345), uint8(22))
	f.Add("100004", "8123456785", uint32(812345678), uint8(24))
	f.Add("", "", uint32(0), uint8(255))
	f.Add("50211", "٠١٢٣٤٥٦٧٨٥", uint32(999999999), uint8(7))
	f.Fuzz(func(t *testing.T, bank, account string, serialN uint32, bankIdx uint8) {
		if ValidNUBAN(bank, account) {
			if len(account) != 10 || !allASCIIDigits(account) {
				t.Fatalf("accepted malformed account %q", account)
			}
			found, ok := FindBank(bank)
			if !ok {
				t.Fatalf("accepted unknown bank %q", bank)
			}
			// The check digit is the CBN code's, whichever code names the
			// bank (a NIP code such as 000010 included).
			if d, ok := NUBANCheckDigit(found.Code, account[:9]); !ok || d != account[9] {
				t.Fatalf("accepted %q at %q with check digit %q,%v", account, bank, d, ok)
			}
		}
		_, _ = NUBANCheckDigit(bank, account)

		b := Banks[int(bankIdx)%len(Banks)]
		serial := fmt.Sprintf("%09d", serialN%1_000_000_000)
		d, ok := NUBANCheckDigit(b.Code, serial)
		if !ok || d < '0' || d > '9' {
			t.Fatalf("NUBANCheckDigit(%q, %q) = %q, %v", b.Code, serial, d, ok)
		}
		for c := byte('0'); c <= '9'; c++ {
			if got := ValidNUBAN(b.Code, serial+string(c)); got != (c == d) {
				t.Fatalf("ValidNUBAN(%q, %q) = %v; check digit is %q", b.Code, serial+string(c), got, d)
			}
		}
	})
}
