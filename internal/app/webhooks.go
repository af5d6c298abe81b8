package app

import (
	"context"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/domain/webhook"
	"github.com/escrowd/escrowd/eventstore"
)

// SetWebhookURL sets the acting merchant's callback URL of the actor's
// environment ("" clears it). The caller has validated the URL (webhooks.
// ValidateCallbackURL: it resolves DNS, which a command must not). Setting
// the URL it already has appends nothing.
func (s *Service) SetWebhookURL(ctx context.Context, a Actor, url string) (eventstore.Position, error) {
	if !a.Environment.Valid() {
		return eventstore.Position{}, domain.Invalidf("environment must be test or live")
	}
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		m, err := Read(tx, MerchantKind, a.MerchantID)
		if err != nil {
			return err
		}
		if !m.Exists() {
			return domain.Errorf(domain.NotFound, "Merchant not found")
		}
		if m.Webhooks[a.Environment] == url {
			return ErrNothingToDo
		}
		Record(tx, MerchantKind, a.MerchantID, merchant.WebhookURLSet{Environment: a.Environment, URL: url})
		return nil
	})
	return res.Position, err
}

// QueuedDelivery is a webhook delivery the outbox has queued for another
// attempt.
type QueuedDelivery struct {
	ID string
	// Event is the webhook event it carries.
	Event string
	// EscrowID is the escrow whose event it announces ("" for a payment's).
	EscrowID string
}

// RequestRedelivery has queue (the webhook outbox's retry of one of a's
// merchant's deliveries of a's environment, which refuses a delivery in
// flight or retried by hand too often) queue the delivery for another
// attempt, and records who asked (webhook.RedeliveryRequested): in the
// escrow's stream when the delivery announces an escrow's event, so the
// escrow's timeline shows it, else in the delivery's own. The delivery
// log is not in the event store, so the two are separate writes: the
// event follows the queueing, so the log never names a redelivery that
// was refused; a failed append is this call's error.
func (s *Service) RequestRedelivery(ctx context.Context, a Actor, queue func(context.Context) (QueuedDelivery, error)) (eventstore.Position, error) {
	if !a.Environment.Valid() {
		return eventstore.Position{}, domain.Invalidf("environment must be test or live")
	}
	d, err := queue(ctx)
	if err != nil {
		return eventstore.Position{}, err
	}
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		ev := webhook.RedeliveryRequested{DeliveryID: d.ID, Event: d.Event, EscrowID: d.EscrowID, RequestedAt: s.Engine.Now()}
		if d.EscrowID != "" {
			e, err := Read(tx, EscrowKind, d.EscrowID)
			if err != nil {
				return err
			}
			if e.Exists() && e.MerchantID == a.MerchantID && e.Environment == a.Environment {
				Record(tx, EscrowKind, d.EscrowID, ev)
				return nil
			}
			ev.EscrowID = ""
		}
		if _, err := Read(tx, WebhookDeliveryKind, d.ID); err != nil {
			return err
		}
		Record(tx, WebhookDeliveryKind, d.ID, ev)
		return nil
	})
	return res.Position, err
}
