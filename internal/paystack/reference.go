package paystack

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
)

// Paystack's alphabet for a transfer reference: lowercase letters, digits,
// '-' and '_', 16 to 50 characters.
const (
	minReference = 16
	maxReference = 50
)

// referencePrefix starts every reference TransferReference makes.
const referencePrefix = "esc_"

// TransferReference is the transfer reference of the record with id
// recordID: the same id always gives the same reference, so a transfer
// asked again for the same record is refused as a duplicate instead of
// paid twice, and two records never share one.
//
// An id already in the alphabet (a UUID, say) is kept readable:
// "esc_" + id. Any other id (upper case, other characters, too short or too
// long) becomes "esc__" + the first 40 hex digits of its SHA-256; the
// double underscore cannot begin a readable one, so the two forms never
// meet.
func TransferReference(recordID string) string {
	if readableID(recordID) {
		return referencePrefix + recordID
	}
	h := sha256.Sum256([]byte(recordID))
	return referencePrefix + "_" + hex.EncodeToString(h[:20])
}

// readableID: lowercase letters, digits and '-' only, of a length that
// fits the prefix in.
func readableID(id string) bool {
	n := len(referencePrefix) + len(id)
	if n < minReference || n > maxReference {
		return false
	}
	for i := 0; i < len(id); i++ {
		ch := id[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '-') {
			return false
		}
	}
	return true
}

// ErrBadReference is a transfer reference outside Paystack's alphabet.
var ErrBadReference = errors.New("a transfer reference is 16 to 50 of a-z, 0-9, '-' and '_'")

// CheckTransferReference returns ErrBadReference unless ref is in
// Paystack's alphabet for a transfer reference.
func CheckTransferReference(ref string) error {
	if len(ref) < minReference || len(ref) > maxReference {
		return ErrBadReference
	}
	for i := 0; i < len(ref); i++ {
		ch := ref[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_') {
			return ErrBadReference
		}
	}
	return nil
}
