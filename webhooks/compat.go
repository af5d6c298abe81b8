package webhooks

import (
	"slices"

	"github.com/escrowd/escrowd/domain/merchant"
)

// The public escrow API's webhook conventions, which a merchant on the
// payluk compatibility profile gets: its signature header (beside ours)
// and a User-Agent naming it. Its signing key is the merchant's
// super-admin key, which the profile makes the signing secret (the
// merchant aggregate records that; nothing here reads keys).
const (
	PaylukSignatureHeader = "x-payluk-signature"
	PaylukUserAgent       = "Payluk-Webhooks/1.0"
)

// conventions are the signature headers and User-Agent of a delivery to a
// merchant on profile p, given the operator's configured ones.
func conventions(p merchant.Profile, headers []string, userAgent string) ([]string, string) {
	if p != merchant.ProfilePayluk {
		return headers, userAgent
	}
	if !slices.Contains(headers, PaylukSignatureHeader) {
		headers = append(slices.Clip(headers), PaylukSignatureHeader)
	}
	if !slices.Contains(headers, SignatureHeader) {
		headers = append(slices.Clip(headers), SignatureHeader)
	}
	return headers, PaylukUserAgent
}
