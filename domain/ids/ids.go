// Package ids is the shape of the identifiers the service issues: record
// ids of 24 lowercase hexadecimal characters (a 4-byte big-endian creation
// time in Unix seconds, then 8 random bytes) for customers, escrows,
// milestones, transactions, categories and whitelisted addresses, and
// payment tokens "PY_" followed by base62 characters. Integrations route
// on these shapes, as they do with the public escrow API's identifiers.
//
// Ids are opaque everywhere else: lookups, filters and cursors take any
// id the service issued, those of earlier builds (UUIDs, "PT_" tokens)
// included, so nothing here is a check an id must pass to be found.
package ids

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"time"
)

// RecordLen is the length of a record id.
const RecordLen = 24

// TokenPrefix starts every payment token the service issues.
const TokenPrefix = "PY_"

// TokenChars is the number of base62 characters after TokenPrefix.
const TokenChars = 24

// Base62 is the alphabet of payment tokens.
const Base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// Record is the record id created at at with the 8 random bytes random.
// Times outside the 32-bit range of Unix seconds wrap, as the public
// API's ids do; the time is informative, never an ordering guarantee.
func Record(at time.Time, random [8]byte) string {
	var b [12]byte
	binary.BigEndian.PutUint32(b[:4], uint32(at.Unix()))
	copy(b[4:], random[:])
	return hex.EncodeToString(b[:])
}

// Derived is the record id of something created at at that a decision
// names by seed (an escrow's settlement records: the escrow's id and the
// record's key). The same seed always gives the same id, so a decision
// that runs again names its records alike.
func Derived(at time.Time, seed string) string {
	sum := sha256.Sum256([]byte(seed))
	var random [8]byte
	copy(random[:], sum[:8])
	return Record(at, random)
}

// IsRecord reports whether s has the shape of a record id.
func IsRecord(s string) bool {
	if len(s) != RecordLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// IsToken reports whether s has the shape of a payment token the service
// issues now: TokenPrefix and at least 20 base62 characters.
func IsToken(s string) bool {
	rest, ok := strings.CutPrefix(s, TokenPrefix)
	if !ok || len(rest) < 20 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if strings.IndexByte(Base62, rest[i]) < 0 {
			return false
		}
	}
	return true
}
