package webhooks

import (
	"context"
	"sync"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
)

// Endpoint is where and how a merchant's messages of one environment go.
type Endpoint struct {
	URL    string // "" when the merchant has none
	Secret string
}

// Endpoints looks a merchant's endpoint up at send time, so a changed URL or
// a rotated secret applies to every attempt made after the change.
type Endpoints interface {
	Endpoint(ctx context.Context, merchantID string, env domain.Environment) (Endpoint, error)
}

// StoreEndpoints reads the merchant aggregate through the command engine's
// cache: each lookup reads only the merchant's events after the cached
// state, usually none.
type StoreEndpoints struct {
	Store eventstore.Store

	once   sync.Once
	engine *app.Engine
}

// maxCachedMerchants bounds the cache (least recently used go first).
const maxCachedMerchants = 10_000

func (s *StoreEndpoints) Endpoint(ctx context.Context, merchantID string, env domain.Environment) (Endpoint, error) {
	s.once.Do(func() { s.engine = app.NewEngine(s.Store, maxCachedMerchants) })
	m, _, err := app.Load(ctx, s.engine, app.MerchantKind, merchantID)
	if err != nil {
		return Endpoint{}, err
	}
	return Endpoint{URL: m.Webhooks[env], Secret: m.SigningSecrets[env]}, nil
}
