package reference

import (
	"regexp"
	"testing"
)

// TestBankNIPCodes: every bank carries a 6-digit NIP code; the deposit
// money banks a 3-digit CBN code; no code names two banks. The pinned rows
// are the examples clients of the public API send.
func TestBankNIPCodes(t *testing.T) {
	six, three := regexp.MustCompile(`^\d{6}$`), regexp.MustCompile(`^\d{3}$`)
	seen := map[string]string{}
	for _, b := range Banks {
		if !six.MatchString(b.NIPCode) {
			t.Errorf("%s: nipCode %q is not 6 digits", b.Name, b.NIPCode)
		}
		// NIP numbers deposit money banks 0000xx; the others keep their
		// NIP code as their code.
		if b.NIPCode[:4] == "0000" && !three.MatchString(b.Code) {
			t.Errorf("%s: a deposit money bank needs its 3-digit CBN code, got %q", b.Name, b.Code)
		}
		if b.NIPCode[:4] != "0000" && b.Code != b.NIPCode {
			t.Errorf("%s: code %q differs from nipCode %q", b.Name, b.Code, b.NIPCode)
		}
		for _, c := range []string{b.Code, b.NIPCode} {
			if other, dup := seen[c]; dup && other != b.Name {
				t.Errorf("code %s names %s and %s", c, other, b.Name)
			}
			seen[c] = b.Name
		}
	}
	for _, tc := range []struct{ cbn, nip string }{
		{"058", "000013"}, {"044", "000014"}, {"057", "000015"}, {"011", "000016"}, {"033", "000004"},
		{"232", "000001"}, {"070", "000007"}, {"035", "000017"},
	} {
		byCBN, ok1 := FindBank(tc.cbn)
		byNIP, ok2 := FindBank(tc.nip)
		if !ok1 || !ok2 || byCBN != byNIP || byCBN.NIPCode != tc.nip {
			t.Errorf("%s/%s: %+v %v, %+v %v", tc.cbn, tc.nip, byCBN, ok1, byNIP, ok2)
		}
	}
}

// TestNUBANByEitherCode: a NUBAN validates, and resolves to the same test
// name, under the bank's CBN code and its NIP code alike; the check digit
// is the CBN code's.
func TestNUBANByEitherCode(t *testing.T) {
	for _, b := range Banks {
		d, _ := NUBANCheckDigit(b.Code, "123456789")
		acct := "123456789" + string(d)
		if !ValidNUBAN(b.NIPCode, acct) || !ValidNUBAN(b.Code, acct) {
			t.Errorf("%s: %s valid by code %v, by nipCode %v", b.Name, acct, ValidNUBAN(b.Code, acct), ValidNUBAN(b.NIPCode, acct))
		}
		if TestAccountName(b.NIPCode, acct) != TestAccountName(b.Code, acct) {
			t.Errorf("%s: the two codes resolve %s to different names", b.Name, acct)
		}
	}
	// GTBank 0123456785 (check digit worked out in nuban_test.go) and the
	// same serial with the digit the NIP code itself would give.
	if !ValidNUBAN("000013", "0123456785") {
		t.Error("0123456785 at 000013")
	}
	wrong, _ := NUBANCheckDigit("000013", "012345678")
	if wrong != '5' && ValidNUBAN("000013", "012345678"+string(wrong)) {
		t.Error("the check digit was computed with the NIP code")
	}
}
