package paystack

import (
	"crypto/hmac"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"strings"
)

// SignatureHeader carries an event's signature.
const SignatureHeader = "X-Paystack-Signature"

// Event is an event Paystack posts to the integration's webhook URL:
// "charge.success", "transfer.success", "transfer.failed",
// "transfer.reversed", and others. Its data is to be trusted only after
// the signature checks, and money moved only on what a verify answers.
type Event struct {
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
}

// Sign returns the signature of an event body: the lowercase hex
// HMAC-SHA512 of the raw body keyed with the secret key.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha512.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// VerifySignature reports whether header is the signature of body under
// secret, in constant time. An empty secret verifies nothing.
func VerifySignature(secret string, body []byte, header string) bool {
	if secret == "" {
		return false
	}
	got, err := hex.DecodeString(strings.TrimSpace(header))
	if err != nil || len(got) != sha512.Size {
		return false
	}
	m := hmac.New(sha512.New, []byte(secret))
	m.Write(body)
	return hmac.Equal(got, m.Sum(nil))
}

// ParseEvent reads a signed event's body.
func ParseEvent(body []byte) (Event, error) {
	var e Event
	err := json.Unmarshal(body, &e)
	return e, err
}

// TransactionOf reads the data of a charge event ("charge.success") as a
// transaction. What it says is the event's claim, not Paystack's verified
// answer.
func TransactionOf(e Event) (Transaction, error) {
	var w wireTransaction
	if err := json.Unmarshal(e.Data, &w); err != nil {
		return Transaction{}, err
	}
	return w.transaction(), nil
}

// TransferOf reads the data of a transfer event ("transfer.success",
// "transfer.failed", "transfer.reversed") as a transfer. What it says is
// the event's claim, not Paystack's verified answer.
func TransferOf(e Event) (Transfer, error) {
	var w wireTransfer
	if err := json.Unmarshal(e.Data, &w); err != nil {
		return Transfer{}, err
	}
	return w.transfer()
}
