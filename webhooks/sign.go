package webhooks

import (
	"crypto/hmac"
	"crypto/sha512"
	"encoding/hex"
	"strings"
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
