package domain

import (
	"context"
	"strings"
)

// SealedPrefix starts every sealed value.
const SealedPrefix = "escrowd-sealed:v1:"

// IsSealed reports whether v is a sealed value.
func IsSealed(v string) bool { return strings.HasPrefix(v, SealedPrefix) }

// DataOwner names whose data key seals a value: a customer's or a
// merchant's (the keyring's subjects).
type DataOwner string

func CustomerData(id string) DataOwner { return DataOwner("customer:" + id) }
func MerchantData(id string) DataOwner { return DataOwner("merchant:" + id) }

// Sealer seals the personal and secret values kept outside the event log
// (the read models' columns, the webhook outbox, cached answers) with
// their owner's data key, the key the log's own copy is sealed with, so
// destroying it erases every copy at once. where names the place a value
// is kept ("rm_customers.email"): a sealed value opens only there.
type Sealer interface {
	// Seal is plain sealed; Erased when owner's key was destroyed (a
	// forgotten customer's data is not kept again).
	Seal(ctx context.Context, owner DataOwner, where, plain string) (string, error)
	// Open is what Seal sealed: Erased once its owner's key was
	// destroyed; a value that is not sealed comes back as it is (a row
	// written before sealing, until a rebuild rewrites it).
	Open(ctx context.Context, where, sealed string) (string, error)
}
