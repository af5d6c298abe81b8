package webhooks

import (
	"context"
	"sync"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/eventstore"
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

// StoreEndpoints folds the merchant's stream from the event store. It keeps
// each folded merchant and reads only the events after it, so a lookup is
// one indexed query that usually returns nothing.
type StoreEndpoints struct {
	Store eventstore.Store

	mu     sync.Mutex
	states map[string]foldedMerchant
}

type foldedMerchant struct {
	state merchant.State
	next  uint64 // revision of the next event to read
}

// maxCachedMerchants bounds the cache; past it, the cache starts over.
const maxCachedMerchants = 10_000

func (s *StoreEndpoints) Endpoint(ctx context.Context, merchantID string, env domain.Environment) (Endpoint, error) {
	stream := "merchant-" + merchantID
	s.mu.Lock()
	f := s.states[stream]
	s.mu.Unlock()
	for {
		events, err := s.Store.ReadStream(ctx, stream, f.next, 1000)
		if err != nil {
			return Endpoint{}, err
		}
		for _, re := range events {
			ev, err := merchant.Registry.Decode(re.Type, re.Data)
			if err != nil {
				return Endpoint{}, err
			}
			f.state = merchant.Apply(f.state, ev)
			f.next = re.Revision + 1
		}
		if len(events) < 1000 {
			break
		}
	}
	s.mu.Lock()
	if s.states == nil || len(s.states) >= maxCachedMerchants {
		s.states = map[string]foldedMerchant{}
	}
	if cur, ok := s.states[stream]; !ok || cur.next <= f.next {
		s.states[stream] = f
	}
	s.mu.Unlock()
	return Endpoint{URL: f.state.Webhooks[env], Secret: f.state.SigningSecrets[env]}, nil
}
