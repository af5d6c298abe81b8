package app

import (
	"context"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/whitelist"
	"github.com/escrowd/escrowd/eventstore"
)

// AddWhitelistAddress whitelists a crypto address for one of the actor's
// customers. The whole list is one stream, so the limit and the duplicate
// rule hold under concurrent adds.
func (s *Service) AddWhitelistAddress(ctx context.Context, a Actor, customerID string, in whitelist.NewAddress) (whitelist.Address, eventstore.Position, error) {
	id := s.newRecordID()
	var out whitelist.Address
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		if _, err := loadOwnCustomer(tx, a, customerID, domain.Errorf(domain.NotFound, "Customer not found")); err != nil {
			return err
		}
		wl, err := Read(tx, WhitelistKind, customerID)
		if err != nil {
			return err
		}
		ev, err := whitelist.Add(wl, id, customerID, a.MerchantID, a.Environment, in, s.Engine.Now())
		if err != nil {
			return err
		}
		Record(tx, WhitelistKind, customerID, ev)
		out, _ = whitelist.Apply(wl, ev).Find(id)
		return nil
	})
	return out, res.Position, err
}

// RemoveWhitelistAddress removes one of a customer's whitelisted addresses
// and returns it as it was.
func (s *Service) RemoveWhitelistAddress(ctx context.Context, a Actor, customerID, addressID string) (whitelist.Address, eventstore.Position, error) {
	var out whitelist.Address
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		if _, err := loadOwnCustomer(tx, a, customerID, domain.Errorf(domain.NotFound, "Customer not found")); err != nil {
			return err
		}
		wl, err := Read(tx, WhitelistKind, customerID)
		if err != nil {
			return err
		}
		ev, err := whitelist.Remove(wl, addressID, s.Engine.Now())
		if err != nil {
			return err
		}
		out, _ = wl.Find(addressID)
		Record(tx, WhitelistKind, customerID, ev)
		return nil
	})
	return out, res.Position, err
}
