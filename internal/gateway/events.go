package gateway

// Events reads a provider's inbound events (its webhooks). The adapter
// knows the provider's wire format and signature; what an event does is
// the application's, and it never believes an event's body about money:
// it asks the provider (Payouts.Status, Collection) and acts on that.
type Events interface {
	// Provider names the provider ("paystack"): the inbox keeps events
	// per provider.
	Provider() string
	// Authentic reports whether signature is the provider's signature of
	// body, the request's raw bytes.
	Authentic(body []byte, signature string) bool
	// Read reads an authentic event.
	Read(body []byte) (ProviderEvent, error)
}

// EventKind is what an event is about, as far as this service acts on it.
type EventKind string

const (
	// PayoutEvent: a payout's outcome (Paystack's transfer.success,
	// transfer.failed, transfer.reversed).
	PayoutEvent EventKind = "payout"
	// ChargeEvent: money received (Paystack's charge.success).
	ChargeEvent EventKind = "charge"
	// OtherEvent: anything else; kept and acknowledged, nothing done.
	OtherEvent EventKind = "other"
)

// ProviderEvent is an inbound event as the adapter reads it.
type ProviderEvent struct {
	// ID is the event's identity: the same event delivered again has the
	// same ID, and another event never does.
	ID string
	// Name is the provider's name of the event ("transfer.success").
	Name string
	Kind EventKind
	// Reference is the provider's reference of the payout or charge the
	// event is about (for a payout, Payouts.Reference of its withdrawal).
	Reference string
}
