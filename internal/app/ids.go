package app

import (
	"crypto/rand"
	"time"

	"github.com/escrowd/escrowd/domain/ids"
)

// IDs issues the identifiers of new records and payment links. The
// service's are random (newIDs); a test may issue other shapes, as an
// earlier build did, to prove those keep working.
type IDs struct {
	// Record is the id of a new customer, escrow, milestone, transaction,
	// category or whitelisted address created at the given time.
	Record func(at time.Time) string
	// PaymentToken is the token of a new escrow.
	PaymentToken func() string
}

func newIDs() IDs { return IDs{Record: newRecordID, PaymentToken: newPaymentToken} }

// newRecordID is a record id of at with 8 bytes from the system's CSPRNG.
func newRecordID(at time.Time) string {
	var random [8]byte
	_, _ = rand.Read(random[:]) // crypto/rand.Read never fails (it crashes the program instead)
	return ids.Record(at, random)
}

// newPaymentToken is a payment token of uniformly random base62
// characters.
func newPaymentToken() string { return ids.TokenPrefix + randomBase62(ids.TokenChars) }
