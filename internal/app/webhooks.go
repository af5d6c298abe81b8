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

// Redeliverable is a webhook delivery the outbox may deliver again: not in
// flight, and redelivered by hand Redelivered times so far.
type Redeliverable struct {
	ID string
	// Event is the webhook event it carries.
	Event string
	// EscrowID is the escrow whose event it announces ("" for a payment's).
	EscrowID    string
	Redelivered int
}

// RequestRedelivery records that a asked for another delivery of the
// delivery check finds (the webhook outbox's look-up of one of a's
// merchant's deliveries of a's environment, which refuses one unknown or
// in flight). The request is one append: webhook.RedeliveryRequested in
// the delivery's own stream, where the webhook subscriber queues the
// delivery again in the transaction that moves its checkpoint past it, and
// in the escrow's stream too when the delivery announces an escrow's
// event, for the escrow's timeline. So every request recorded is
// delivered again exactly once, and none is delivered unrecorded.
func (s *Service) RequestRedelivery(ctx context.Context, a Actor, check func(context.Context) (Redeliverable, error)) (eventstore.Position, error) {
	if !a.Environment.Valid() {
		return eventstore.Position{}, domain.Invalidf("environment must be test or live")
	}
	d, err := check(ctx)
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
			if !e.Exists() || e.MerchantID != a.MerchantID || e.Environment != a.Environment {
				ev.EscrowID = ""
			}
		}
		del, err := Read(tx, WebhookDeliveryKind, d.ID)
		if err != nil {
			return err
		}
		if ev, err = webhook.Redeliver(del, d.Redelivered, ev); err != nil {
			return err
		}
		Record(tx, WebhookDeliveryKind, d.ID, ev)
		if ev.EscrowID != "" {
			Record(tx, EscrowKind, ev.EscrowID, ev)
		}
		return nil
	})
	return res.Position, err
}
