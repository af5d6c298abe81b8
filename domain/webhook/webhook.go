// Package webhook holds what the merchant's people do with the webhooks
// the service sends: asking for one to be delivered again. Delivery
// itself (the outbox, attempts, signatures) is outside the domain.
package webhook

import (
	"time"

	"github.com/escrowd/escrowd/domain"
)

// RedeliveryRequested records that a delivery was queued for another
// attempt at the request of the event's actor (a dashboard user or an API
// key). It is recorded in the stream of the escrow whose event the
// delivery announces, so the escrow's timeline shows it, and otherwise in
// the delivery's own stream.
type RedeliveryRequested struct {
	DeliveryID string `json:"deliveryId"`
	// Event is the webhook event the delivery carries ("escrow.completed").
	Event string `json:"event"`
	// EscrowID is the escrow the delivery's event is of; "" for a payment's.
	EscrowID    string    `json:"escrowId,omitempty"`
	RequestedAt time.Time `json:"requestedAt"`
}

func (RedeliveryRequested) EventType() string { return "webhook.redelivery_requested" }

// Delivery is a delivery's own stream folded: how many redeliveries were
// requested of it.
type Delivery struct {
	ID          string
	Redelivered int
}

// Registry decodes the events of a delivery's own stream.
var Registry = domain.NewRegistry(
	func() domain.Event { return &RedeliveryRequested{} },
)

// Apply folds a delivery's event.
func Apply(s Delivery, ev domain.Event) Delivery {
	if e, ok := ev.(RedeliveryRequested); ok {
		s.ID = e.DeliveryID
		s.Redelivered++
	}
	return s
}
