package reference

import (
	"crypto/sha256"
	"encoding/binary"
)

// NUBAN (Nigeria Uniform Bank Account Number) check digit.
//
// A NUBAN is 10 digits: a 9-digit account serial followed by one check
// digit computed over the institution code and the serial.
//
//   - Deposit money banks (3-digit CBN code ABC, serial DEFGHIJKL), per
//     the CBN "Proposals on the implementation of NUBAN scheme" v0.4
//     (2010): sum = A*3+B*7+C*3+D*3+E*7+F*3+G*3+H*7+I*3+J*3+K*7+L*3,
//     check = 10 - sum%10, with 10 written as 0.
//   - Other financial institutions (microfinance banks, mobile money
//     operators, ...), per the CBN "Revised standards on NUBAN scheme for
//     DMBs and OFIs" (March 2020): the institution code is 6 digits
//     ("9" + the 5-digit code, or a 6-digit code as is) and the 15 digits
//     code+serial are weighted 3,7,3,3,7,3,3,7,3,3,7,3,3,7,3 the same way.
//
// The revision pads 3-digit bank codes with "000" to 6 digits; zeros add
// nothing to the sum, so both schemes agree for the 3-digit banks.

// nubanWeights are the CBN NUBAN weights for a 6-digit institution code
// followed by the 9-digit serial; a 3-digit code uses the last 12.
var nubanWeights = [15]int{3, 7, 3, 3, 7, 3, 3, 7, 3, 3, 7, 3, 3, 7, 3}

// allASCIIDigits reports whether s is non-empty and all '0'..'9'.
func allASCIIDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// NUBANCheckDigit returns the NUBAN check digit, as an ASCII character
// '0'..'9', for the 9-digit account serial serial9 at the institution with
// bankCode (3-digit CBN bank code, 5-digit OFI code, or 6-digit
// institution code). It returns false when bankCode or serial9 is not of
// that form; it does not check that bankCode is in Banks. The account
// number is serial9 + string(digit).
func NUBANCheckDigit(bankCode, serial9 string) (byte, bool) {
	if len(serial9) != 9 || !allASCIIDigits(serial9) || !allASCIIDigits(bankCode) {
		return 0, false
	}
	var code string
	switch len(bankCode) {
	case 3:
		code = "000" + bankCode
	case 5:
		code = "9" + bankCode
	case 6:
		code = bankCode
	default:
		return 0, false
	}
	digits := code + serial9
	sum := 0
	for i := 0; i < len(digits); i++ {
		sum += int(digits[i]-'0') * nubanWeights[i]
	}
	return byte('0' + (10-sum%10)%10), true
}

// ValidNUBAN reports whether accountNumber is a well-formed NUBAN at the
// bank with bankCode (its CBN or NIP code): exactly 10 ASCII digits, bankCode a bank in Banks,
// and the last digit the NUBAN check digit of the first nine.
//
// Caution: some wallets (e.g. OPay, PalmPay) issue the customer's phone
// number as the account number, which need not carry a NUBAN check digit;
// for those banks a false result does not prove the account is wrong.
func ValidNUBAN(bankCode, accountNumber string) bool {
	if len(accountNumber) != 10 || !allASCIIDigits(accountNumber) {
		return false
	}
	bank, ok := FindBank(bankCode)
	if !ok {
		return false
	}
	// The check digit is computed with the CBN code, whichever code was
	// sent: 000013 (NIP) names GTBank, whose NUBANs use 058.
	d, ok := NUBANCheckDigit(bank.Code, accountNumber[:9])
	return ok && d == accountNumber[9]
}

// Names for TestAccountName, drawn from across Nigeria. Changing or
// reordering these lists changes every generated name.
var (
	testFirstNames = [...]string{
		"ADEWALE", "ADAEZE", "AISHA", "AMINA", "BABAJIDE", "BOLANLE",
		"CHIDI", "CHIAMAKA", "CHINEDU", "DAMILOLA", "EMEKA", "FATIMA",
		"FOLAKE", "FUNMILAYO", "IBRAHIM", "IFEOMA", "KEHINDE", "MUSA",
		"NGOZI", "NNAMDI", "OLUWASEUN", "OLUWATOYIN", "SANI", "TAIWO",
		"TEMITOPE", "TUNDE", "UCHENNA", "YETUNDE", "YUSUF", "ZAINAB",
		"EFE", "OSAGIE",
	}
	testLastNames = [...]string{
		"ABUBAKAR", "ADEBAYO", "ADEYEMI", "AKINOLA", "BALOGUN", "BELLO",
		"DANJUMA", "EZE", "EKWUEME", "IBEKWE", "IGBINEDION", "LAWAL",
		"MOHAMMED", "NWACHUKWU", "NWOSU", "OBI", "OGUNLEYE", "OKAFOR",
		"OKEKE", "OKONKWO", "OKORO", "OLAWALE", "ONYEKACHI", "OYELARAN",
		"SALAMI", "SHEHU", "UMAR", "USMAN", "UZOMA", "YAKUBU",
		"ETIM", "EDET",
	}
)

// TestAccountName returns a stable, realistic-looking upper-case account
// name ("FIRSTNAME LASTNAME") for a test account: the same bankCode and
// accountNumber always give the same name. It picks from fixed name lists
// by the SHA-256 of bankCode+":"+accountNumber, with a bank's NIP code
// read as its CBN code so that both name one account. It is for test and
// sandbox name resolution only.
func TestAccountName(bankCode, accountNumber string) string {
	if b, ok := FindBank(bankCode); ok {
		bankCode = b.Code
	}
	h := sha256.Sum256([]byte(bankCode + ":" + accountNumber))
	first := binary.BigEndian.Uint64(h[0:8]) % uint64(len(testFirstNames))
	last := binary.BigEndian.Uint64(h[8:16]) % uint64(len(testLastNames))
	return testFirstNames[first] + " " + testLastNames[last]
}
