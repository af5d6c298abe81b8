package dashauth

import (
	"crypto/subtle"
	"net/url"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"
)

// totpPeriod is RFC 6238's time step.
const totpPeriod = 30

// Issuer names the service in authenticator apps.
const Issuer = "escrowd"

// NewTOTPKey makes a TOTP secret for account (the user's email).
func NewTOTPKey(account string) (*otp.Key, error) {
	return totp.Generate(totp.GenerateOpts{Issuer: Issuer, AccountName: account, Period: totpPeriod,
		Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1})
}

// TOTPKeyURL is the otpauth:// URL of secret (base32), which
// authenticator apps read from a QR code.
func TOTPKeyURL(account, secret string) string {
	v := url.Values{}
	v.Set("secret", secret)
	v.Set("issuer", Issuer)
	v.Set("algorithm", "SHA1")
	v.Set("digits", "6")
	v.Set("period", "30")
	u := url.URL{Scheme: "otpauth", Host: "totp", Path: "/" + Issuer + ":" + account, RawQuery: v.Encode()}
	return u.String()
}

// TOTPCode is secret's code at t (tests and the login's check).
func TOTPCode(secret string, t time.Time) (string, error) {
	return totp.GenerateCodeCustom(secret, t, totp.ValidateOpts{Period: totpPeriod, Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1})
}

// matchStep returns the time step code is secret's code for, among the
// step of now and one either side (clocks drift), and whether one is.
func matchStep(secret, code string, now time.Time) (int64, bool) {
	if len(code) != 6 {
		return 0, false
	}
	step := now.Unix() / totpPeriod
	found := int64(0)
	for _, s := range []int64{step - 1, step, step + 1} {
		want, err := TOTPCode(secret, time.Unix(s*totpPeriod, 0))
		if err != nil {
			return 0, false
		}
		if subtle.ConstantTimeCompare([]byte(want), []byte(code)) == 1 {
			found = s
		}
	}
	return found, found != 0
}
