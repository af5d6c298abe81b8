package app

import (
	"context"

	"github.com/escrowd/escrowd/domain/category"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/eventstore"
)

// categoryNameTaken is the refusal of a name another category of the same
// merchant and environment holds (in any case).
const categoryNameTaken = "A category with this name already exists"

// CreateCategory creates a category and claims its name in the same append,
// so two concurrent creates with one name cannot both succeed.
func (s *Service) CreateCategory(ctx context.Context, a Actor, in category.New) (string, eventstore.Position, error) {
	id := s.newID()
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		created, err := category.Create(id, a.MerchantID, a.Environment, in, s.Engine.Now())
		if err != nil {
			return err
		}
		if err := claim(tx, category.NameKey(a.MerchantID, a.Environment, created.Name), id, categoryNameTaken); err != nil {
			return err
		}
		Record(tx, CategoryKind, id, created)
		return nil
	})
	return id, res.Position, err
}

// UpdateCategory renames a category and/or changes its description. A new
// name (other than a change of case) moves the name's reservation; an edit
// that changes nothing appends nothing.
func (s *Service) UpdateCategory(ctx context.Context, a Actor, id string, in category.Edit) (eventstore.Position, error) {
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		c, err := s.ownCategory(tx, a, id, Read[category.State])
		if err != nil {
			return err
		}
		ev, changed, err := category.Update(c, in, s.Engine.Now())
		if err != nil {
			return err
		}
		if !changed {
			return ErrNothingToDo
		}
		if ev.Name != nil {
			if newKey, oldKey := category.NameKey(a.MerchantID, a.Environment, *ev.Name), c.NameKey(); newKey != oldKey {
				if err := claim(tx, newKey, id, categoryNameTaken); err != nil {
					return err
				}
				if err := releaseCategoryName(tx, oldKey, id); err != nil {
					return err
				}
			}
		}
		Record(tx, CategoryKind, id, ev)
		return nil
	})
	return res.Position, err
}

// DeleteCategory deletes a category and frees its name.
func (s *Service) DeleteCategory(ctx context.Context, a Actor, id string) (eventstore.Position, error) {
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		c, err := s.ownCategory(tx, a, id, Read[category.State])
		if err != nil {
			return err
		}
		ev, err := category.Delete(c, s.Engine.Now())
		if err != nil {
			return err
		}
		if err := releaseCategoryName(tx, c.NameKey(), id); err != nil {
			return err
		}
		Record(tx, CategoryKind, id, ev)
		return nil
	})
	return res.Position, err
}

// OwnCategory reads, inside another command, a live category of the actor's
// merchant and environment: anything else is 404 Category not found. The
// command's append also proves the category unchanged since (so an escrow
// filed under it cannot race its deletion); it does not write to it, so
// commands that only reference one category never conflict with each other.
func (s *Service) OwnCategory(tx *Tx, a Actor, id string) (category.State, error) {
	return s.ownCategory(tx, a, id, Guard[category.State])
}

func (s *Service) ownCategory(tx *Tx, a Actor, id string,
	read func(*Tx, Kind[category.State], string) (category.State, error)) (category.State, error) {
	if id == "" {
		return category.State{}, category.ErrNotFound
	}
	c, err := read(tx, CategoryKind, id)
	if err != nil {
		return c, err
	}
	if !c.Exists() || c.MerchantID != a.MerchantID || c.Environment != a.Environment {
		return category.State{}, category.ErrNotFound
	}
	return c, nil
}

// releaseCategoryName frees a name reservation if holder holds it.
func releaseCategoryName(tx *Tx, key, holder string) error {
	r, err := Read(tx, ReservationKind, key)
	if err != nil {
		return err
	}
	if r.Holder == holder {
		Record(tx, ReservationKind, key, customer.ReservationReleased{Holder: holder})
	}
	return nil
}
