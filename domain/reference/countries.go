// Package reference holds the static reference data: countries and banks.
package reference

import "strings"

// Country is a supported customer country.
type Country struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	ISOCode  string `json:"isoCode"`
	DialCode string `json:"dialCode"`
	Currency string `json:"currency"`
	// NationalLength is the number of digits of a national number without
	// the trunk 0.
	NationalLength int `json:"-"`
}

// Countries lists the supported countries in display order.
var Countries = []Country{
	{ID: "cty_ng", Name: "Nigeria", ISOCode: "NG", DialCode: "234", Currency: "NGN", NationalLength: 10},
	{ID: "cty_gh", Name: "Ghana", ISOCode: "GH", DialCode: "233", Currency: "GHS", NationalLength: 9},
	{ID: "cty_ke", Name: "Kenya", ISOCode: "KE", DialCode: "254", Currency: "KES", NationalLength: 9},
	{ID: "cty_za", Name: "South Africa", ISOCode: "ZA", DialCode: "27", Currency: "ZAR", NationalLength: 9},
	{ID: "cty_gb", Name: "United Kingdom", ISOCode: "GB", DialCode: "44", Currency: "GBP", NationalLength: 10},
	{ID: "cty_us", Name: "United States", ISOCode: "US", DialCode: "1", Currency: "USD", NationalLength: 10},
}

// FindCountry resolves a country id or ISO code (case-insensitive).
func FindCountry(idOrISO string) (Country, bool) {
	v := strings.TrimSpace(idOrISO)
	for _, c := range Countries {
		if strings.EqualFold(c.ID, v) || strings.EqualFold(c.ISOCode, v) {
			return c, true
		}
	}
	return Country{}, false
}

// NormalizePhone turns one of the three accepted spellings of a number of
// country c (0N, DN, D0N; digits only) into the stored local form 0N.
func NormalizePhone(c Country, raw string) (string, bool) {
	if raw == "" {
		return "", false
	}
	for _, r := range raw {
		if r < '0' || r > '9' {
			return "", false
		}
	}
	n := c.NationalLength
	switch {
	case len(raw) == n+1 && raw[0] == '0':
		return raw, true
	case len(raw) == len(c.DialCode)+n && strings.HasPrefix(raw, c.DialCode) && raw[len(c.DialCode)] != '0':
		return "0" + raw[len(c.DialCode):], true
	case len(raw) == len(c.DialCode)+n+1 && strings.HasPrefix(raw, c.DialCode+"0"):
		return raw[len(c.DialCode):], true
	}
	return "", false
}

// PhoneCandidates lists the local forms raw may denote in any supported
// country, preferring the given country first. Used for lookups, which
// accept any spelling.
func PhoneCandidates(preferred Country, raw string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(c Country) {
		if p, ok := NormalizePhone(c, raw); ok && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	add(preferred)
	for _, c := range Countries {
		add(c)
	}
	return out
}
