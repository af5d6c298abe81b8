package app

import (
	"context"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/eventstore"
)

// ChangeMerchant applies a merchant's own decision on its settings (keys,
// webhook, allowlist), recorded with a as the actor: the dashboard's
// changes carry the user who made them. a.MerchantID names the merchant.
func (s *Service) ChangeMerchant(ctx context.Context, a Actor, decide func(merchant.State) ([]domain.Event, error)) (eventstore.Position, error) {
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		m, err := Read(tx, MerchantKind, a.MerchantID)
		if err != nil {
			return err
		}
		if !m.Exists() {
			return domain.Errorf(domain.NotFound, "Merchant not found")
		}
		events, err := decide(m)
		if err != nil {
			return err
		}
		if len(events) == 0 {
			return ErrNothingToDo
		}
		Record(tx, MerchantKind, a.MerchantID, events...)
		return nil
	})
	return res.Position, err
}

// IssueKeyAs issues one more key of a's merchant and environment, recorded
// with a as the actor.
func (s *Service) IssueKeyAs(ctx context.Context, a Actor, role merchant.Role, digest KeyDigest) (IssuedKey, eventstore.Position, error) {
	k := s.newKey(a.Environment, role, digest)
	pos, err := s.ChangeMerchant(ctx, a, func(m merchant.State) ([]domain.Event, error) {
		return merchant.IssueKey(m, k.event)
	})
	if err != nil {
		return IssuedKey{}, pos, err
	}
	return k.plain, pos, nil
}

// RevokeKeyAs revokes a key of a's merchant and environment: a key of the
// other environment is not found here, so a page of one environment
// cannot reach the other's keys.
func (s *Service) RevokeKeyAs(ctx context.Context, a Actor, keyID string) (eventstore.Position, error) {
	return s.ChangeMerchant(ctx, a, func(m merchant.State) ([]domain.Event, error) {
		if k, ok := m.Keys[keyID]; !ok || k.Environment != a.Environment {
			return nil, domain.Errorf(domain.NotFound, "Key not found")
		}
		return merchant.RevokeKey(m, keyID, s.Engine.Now())
	})
}

// RecordDashboardUserAdded records that the dashboard (its own store) gave
// userID a login of a's merchant with role, with a as the actor: an owner
// on the Users page, or the operator.
func (s *Service) RecordDashboardUserAdded(ctx context.Context, a Actor, userID, role string) (eventstore.Position, error) {
	return s.ChangeMerchant(ctx, a, func(merchant.State) ([]domain.Event, error) {
		return []domain.Event{merchant.DashboardUserAdded{UserID: userID, Role: role, At: s.Engine.Now()}}, nil
	})
}

// RecordDashboardUserRemoved records that the dashboard removed userID's
// login of a's merchant, with a as the actor.
func (s *Service) RecordDashboardUserRemoved(ctx context.Context, a Actor, userID string) (eventstore.Position, error) {
	return s.ChangeMerchant(ctx, a, func(merchant.State) ([]domain.Event, error) {
		return []domain.Event{merchant.DashboardUserRemoved{UserID: userID, At: s.Engine.Now()}}, nil
	})
}
