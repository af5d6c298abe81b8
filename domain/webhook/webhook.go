// Package webhook holds what the merchant's people do with the webhooks
// the service sends: asking for one to be delivered again. Delivery
// itself (the outbox, attempts, signatures) is outside the domain.
package webhook

import (
	"time"

	"github.com/escrowd/escrowd/domain"
)

// StreamKind names a delivery's own stream: StreamKind + "-" + its id.
const StreamKind = "webhookdelivery"

// MaxRedeliveries bounds how many times one delivery may be redelivered
// by hand.
const MaxRedeliveries = 10

// ErrRedeliveriesExhausted refuses a redelivery past MaxRedeliveries.
var ErrRedeliveriesExhausted = domain.Invalidf("A delivery may be retried by hand at most %d times", MaxRedeliveries)

// RedeliveryRequested records that a delivery was asked to be delivered
// again, by the event's actor (a dashboard user or an API key). It is
// recorded in the delivery's own stream, where the webhook outbox acts on
// it, and, when the delivery announces an escrow's event, in the same
// append in the escrow's stream too, so the escrow's timeline shows it.
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

// Redeliver decides the redelivery ev of d, which the outbox counts as
// redelivered outboxCount times. Either count may be behind the other: the
// outbox acts on a request after it is recorded, and it counts every
// redelivery it made, whatever stream asked for it. The larger is the
// count.
func Redeliver(d Delivery, outboxCount int, ev RedeliveryRequested) (RedeliveryRequested, error) {
	if max(d.Redelivered, outboxCount) >= MaxRedeliveries {
		return RedeliveryRequested{}, ErrRedeliveriesExhausted
	}
	return ev, nil
}
