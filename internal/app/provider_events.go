// Processing a provider's inbound event, once it is kept in the inbox.

package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/internal/gateway"
)

// ProviderEventsAgent is the actor the events recorded on a provider's
// event carry.
const ProviderEventsAgent = "provider-events"

// ErrProviderNotConfigured: an event kept for a provider the environment
// no longer reads events from (its configuration changed since).
var ErrProviderNotConfigured = errors.New("app: the environment reads no events from that provider")

// ProcessProviderEvent acts on an authenticated provider event of env, as
// kept (body): a payout's event brings its withdrawal to where the
// provider says it stands when asked now (SettleProviderPayout), and a
// charge's puts the charge in the ledger as the provider answers it now
// (SettleCharge), never as the body says. outcome says what was done; an error (the provider
// did not answer, a send is in flight) means the event is to be processed
// again later. Processing one event twice moves money once.
func (s *Service) ProcessProviderEvent(ctx context.Context, env domain.Environment, provider string, body []byte) (outcome string, err error) {
	events := s.gateways(env).Events
	if events == nil || events.Provider() != provider {
		return "", ErrProviderNotConfigured
	}
	ev, err := events.Read(body)
	if err != nil {
		// Authentic but unreadable: kept as received; nothing can be done.
		return "unreadable: " + err.Error(), nil
	}
	switch ev.Kind {
	case gateway.PayoutEvent:
		rec, err := s.SettleProviderPayout(ctx, env, ev.Reference, ProviderEventsAgent)
		if errors.Is(err, ErrUnknownPayout) {
			return fmt.Sprintf("no withdrawal here is paid out by %q", ev.Reference), nil
		}
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("withdrawal %s of merchant %s: %s", rec.Reference, rec.MerchantID, rec.Status), nil
	case gateway.ChargeEvent:
		res, err := s.SettleCharge(ctx, env, ev.Reference, ProviderEventsAgent)
		if err != nil {
			return "", err
		}
		return res.String(), nil
	}
	return "kept: not an event this service acts on", nil
}
