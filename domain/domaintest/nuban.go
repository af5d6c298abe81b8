package domaintest

import (
	"fmt"
	"testing"

	"github.com/escrowd/escrowd/domain/reference"
)

// NUBAN returns a valid account number at bank whose serial starts with
// prefix; with endsIn0000 it ends in 0000 (the test payout provider rejects
// those).
func NUBAN(t testing.TB, bank, prefix string, endsIn0000 bool) string {
	t.Helper()
	for i := 0; i < 100000; i++ {
		serial := fmt.Sprintf("%s%0*d", prefix, 9-len(prefix), i)
		if endsIn0000 {
			serial = fmt.Sprintf("%s%0*d000", prefix, 6-len(prefix), i)
		}
		d, ok := reference.NUBANCheckDigit(bank, serial)
		if !ok {
			t.Fatalf("bank %s has no check digit rule", bank)
		}
		if !endsIn0000 || d == '0' {
			return serial + string(d)
		}
	}
	t.Fatal("no account number found")
	return ""
}
