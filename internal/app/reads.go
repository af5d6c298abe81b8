package app

import (
	"context"
	"time"

	"github.com/escrowd/escrowd/domain/category"
	"github.com/escrowd/escrowd/domain/merchant"
)

// The reads below load an aggregate from the event store through the
// engine's cache (only the events after the cached state are read), never
// from a read model that may lag: the adapters use them where an answer
// must reflect every write made so far.

// Merchant is a merchant's current state (the zero State when there is no
// such merchant): its webhook URLs and signing secrets among others.
func (s *Service) Merchant(ctx context.Context, id string) (merchant.State, error) {
	st, _, err := Load(ctx, s.Engine, MerchantKind, id)
	return st, err
}

// Category is a category's current state (the zero State when there is no
// such category). The caller decides ownership.
func (s *Service) Category(ctx context.Context, id string) (category.State, error) {
	st, _, err := Load(ctx, s.Engine, CategoryKind, id)
	return st, err
}

// Now is the application's clock (the engine's, which tests may move).
func (s *Service) Now() time.Time { return s.Engine.Now() }
