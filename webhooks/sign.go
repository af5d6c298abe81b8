package webhooks

import (
	"crypto/hmac"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"net/textproto"
	"strings"
	"time"

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

// signatures is the value of a delivery's signature headers at now: the
// signature with the endpoint's secret, then, while a rotation's overlap
// lasts, a comma and the signature with the secret it replaced.
func signatures(ep Endpoint, body []byte, now time.Time) string {
	sig := Sign(ep.Secret, body)
	if ep.Previous != "" && now.Before(ep.PreviousUntil) {
		sig += "," + Sign(ep.Previous, body)
	}
	return sig
}

// Verify checks a received signature header in constant time: true when
// one of its comma-separated signatures is body's with secret.
func Verify(secret string, body []byte, header string) bool {
	want, _ := hex.DecodeString(Sign(secret, body))
	ok := false
	for _, sig := range strings.Split(header, ",") {
		got, err := hex.DecodeString(strings.TrimSpace(sig))
		if err == nil && hmac.Equal(got, want) {
			ok = true
		}
	}
	return ok
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
