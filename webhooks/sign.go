package webhooks

import (
	"crypto/hmac"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Headers of a webhook request.
const (
	SignatureHeader = "x-service-signature"
	// AttemptHeader numbers the delivery attempts of one message (1, 2, ...);
	// the body stays identical across attempts.
	AttemptHeader = "x-service-delivery-attempt"
	UserAgent     = "escrowd-webhooks/1"
)

// Sign is the signature of body with secret: lowercase hex HMAC-SHA512 of the
// raw bytes.
func Sign(secret string, body []byte) string {
	mac := hmac.New(sha512.New, []byte(secret))
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// Verify checks a received signature in constant time.
func Verify(secret string, body []byte, signature string) bool {
	got, err := hex.DecodeString(strings.TrimSpace(signature))
	if err != nil {
		return false
	}
	want, _ := hex.DecodeString(Sign(secret, body))
	return hmac.Equal(got, want)
}

// ParseSignatureHeaders reads ESCROW_WEBHOOK_SIGNATURE_HEADERS: a
// comma-separated list of header names (empty: SignatureHeader alone).
// Names are checked against HTTP's token rules and deduplicated case-
// insensitively, as HTTP compares them; headers the delivery sets itself
// cannot be reused.
func ParseSignatureHeaders(s string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !httpguts.ValidHeaderFieldName(name) {
			return nil, fmt.Errorf("%q is not a valid header name", name)
		}
		canon := textproto.CanonicalMIMEHeaderKey(name)
		switch canon {
		case "Content-Type", "User-Agent", "Content-Length", "Host", textproto.CanonicalMIMEHeaderKey(AttemptHeader):
			return nil, fmt.Errorf("%q is set by every delivery and cannot carry the signature", name)
		}
		if seen[canon] {
			continue
		}
		seen[canon] = true
		out = append(out, strings.ToLower(name))
	}
	if len(out) == 0 {
		out = []string{SignatureHeader}
	}
	return out, nil
}
