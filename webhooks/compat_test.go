package webhooks

import (
	"slices"
	"testing"

	"github.com/escrowd/escrowd/domain/merchant"
)

func TestConventionsOfAProfile(t *testing.T) {
	configured := []string{SignatureHeader, "x-other-signature"}
	for _, c := range []struct {
		name        string
		p           merchant.Profile
		headers     []string
		wantHeaders []string
		wantAgent   string
	}{
		{"none: as configured", merchant.ProfileNone, configured, configured, "ops-agent/1"},
		{"unset: as configured", "", configured, configured, "ops-agent/1"},
		{"payluk adds its header", merchant.ProfilePayluk, configured,
			[]string{SignatureHeader, "x-other-signature", PaylukSignatureHeader}, PaylukUserAgent},
		{"payluk keeps ours when the operator dropped it", merchant.ProfilePayluk, []string{"x-other-signature"},
			[]string{"x-other-signature", PaylukSignatureHeader, SignatureHeader}, PaylukUserAgent},
		{"payluk already configured: once", merchant.ProfilePayluk, []string{SignatureHeader, PaylukSignatureHeader},
			[]string{SignatureHeader, PaylukSignatureHeader}, PaylukUserAgent},
	} {
		before := slices.Clone(c.headers)
		headers, agent := conventions(c.p, c.headers, "ops-agent/1")
		if !slices.Equal(headers, c.wantHeaders) || agent != c.wantAgent || !slices.Equal(c.headers, before) {
			t.Errorf("%s: %v %q (configured now %v)", c.name, headers, agent, c.headers)
		}
	}
}
