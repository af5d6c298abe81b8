package app

import (
	"context"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
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
