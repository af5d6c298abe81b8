package domain

import "time"

// Event is a fact recorded by an aggregate. EventType is the stored type
// name: never rename one that has been stored.
type Event interface {
	EventType() string
}

// Environment partitions a merchant's data: "test" or "live".
type Environment string

const (
	Test Environment = "test"
	Live Environment = "live"
)

// Valid reports whether e is a known environment.
func (e Environment) Valid() bool { return e == Test || e == Live }

// Meta travels with every stored event (as its metadata): who caused it and
// for which tenant, so auditors can replay one merchant's history.
type Meta struct {
	MerchantID  string      `json:"merchantId,omitempty"`
	Environment Environment `json:"environment,omitempty"`
	Actor       string      `json:"actor,omitempty"` // key id, customer id or "operator"
	RequestID   string      `json:"requestId,omitempty"`
	OccurredAt  time.Time   `json:"occurredAt"`
}

// Erased is what a personal field reads once its subject's data key is
// destroyed (a forgotten customer): shown as it is, never masked or parsed.
const Erased = "[erased]"
