package webhooks

import (
	"context"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
)

// Endpoint is where and how a merchant's messages of one environment go.
type Endpoint struct {
	URL    string // "" when the merchant has none
	Secret string
	// Previous is the secret Secret replaced, which signs deliveries
	// beside it until PreviousUntil ("" when there is none).
	Previous      string
	PreviousUntil time.Time
	// Profile chooses the delivery's conventions (compat.go).
	Profile merchant.Profile
}

// Endpoints looks a merchant's endpoint up at send time, so a changed URL or
// a rotated secret applies to every attempt made after the change.
type Endpoints interface {
	Endpoint(ctx context.Context, merchantID string, env domain.Environment) (Endpoint, error)
}

// Merchants reads a merchant's current state. The application provides it
// (app.Service.Merchant reads the event store through the command engine's
// cache, so a change is seen by the next lookup); the wiring injects it.
type Merchants interface {
	Merchant(ctx context.Context, id string) (merchant.State, error)
}

// MerchantEndpoints are the endpoints merchants have set, read from their
// current state at each lookup.
type MerchantEndpoints struct {
	Merchants Merchants
}

func (e MerchantEndpoints) Endpoint(ctx context.Context, merchantID string, env domain.Environment) (Endpoint, error) {
	m, err := e.Merchants.Merchant(ctx, merchantID)
	if err != nil {
		return Endpoint{}, err
	}
	ep := Endpoint{URL: m.Webhooks[env], Secret: m.SigningSecrets[env], Profile: m.Profile()}
	if o, ok := m.Overlaps[env]; ok {
		ep.Previous, ep.PreviousUntil = o.Secret, o.Until
	}
	return ep, nil
}
