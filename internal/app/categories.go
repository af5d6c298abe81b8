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

// CreateCategory creates a category and reserves its name in the same append,
// so two concurrent creates with one name cannot both succeed. It is placed
// at position (1-based; 0: the top, so listings stay newest first).
func (s *Service) CreateCategory(ctx context.Context, a Actor, in category.New, position int) (string, eventstore.Position, error) {
	id := s.newRecordID()
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		created, err := category.Create(id, a.MerchantID, a.Environment, in, s.Engine.Now())
		if err != nil {
			return err
		}
		if err := reserveUnique(tx, category.NameKey(a.MerchantID, a.Environment, created.Name), id, categoryNameTaken); err != nil {
			return err
		}
		key := category.OrderKey(a.MerchantID, a.Environment)
		order, err := Read(tx, CategoryOrderKind, key)
		if err != nil {
			return err
		}
		placed, err := category.Place(order, a.MerchantID, a.Environment, id, position, "category_position")
		if err != nil {
			return err
		}
		Record(tx, CategoryKind, id, created)
		Record(tx, CategoryOrderKind, key, placed)
		return nil
	})
	return id, res.Position, err
}

// UpdateCategory renames a category and/or changes its description or
// image, and moves it when position is not 0. A new name (other than a
// change of case) moves the name's reservation; an edit that changes
// nothing appends nothing.
func (s *Service) UpdateCategory(ctx context.Context, a Actor, id string, in category.Edit, position int) (eventstore.Position, error) {
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		c, err := s.ownCategory(tx, a, id, Read[category.State])
		if err != nil {
			return err
		}
		moved := false
		if position != 0 {
			if moved, err = s.moveCategory(tx, a, id, position); err != nil {
				return err
			}
			if in == (category.Edit{}) {
				if !moved {
					return ErrNothingToDo
				}
				return nil
			}
		}
		ev, changed, err := category.Update(c, in, s.Engine.Now())
		if err != nil {
			return err
		}
		if !changed {
			if moved {
				return nil
			}
			return ErrNothingToDo
		}
		if ev.Name != nil {
			if newKey, oldKey := category.NameKey(a.MerchantID, a.Environment, *ev.Name), c.NameKey(); newKey != oldKey {
				if err := reserveUnique(tx, newKey, id, categoryNameTaken); err != nil {
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
		key := category.OrderKey(a.MerchantID, a.Environment)
		order, err := Read(tx, CategoryOrderKind, key)
		if err != nil {
			return err
		}
		if removed, changed := category.Remove(order, a.MerchantID, a.Environment, id); changed {
			Record(tx, CategoryOrderKind, key, removed)
		}
		Record(tx, CategoryKind, id, ev)
		return nil
	})
	return res.Position, err
}

// MoveCategory moves a category to newPosition (1-based) and renumbers the
// others; a move to where it is appends nothing.
func (s *Service) MoveCategory(ctx context.Context, a Actor, id string, newPosition int) (eventstore.Position, error) {
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		if _, err := s.ownCategory(tx, a, id, Guard[category.State]); err != nil {
			return err
		}
		moved, err := s.moveCategory(tx, a, id, newPosition)
		if err == nil && !moved {
			return ErrNothingToDo
		}
		return err
	})
	return res.Position, err
}

// moveCategory records the order with id at newPosition; moved is false
// when it is there already.
func (s *Service) moveCategory(tx *Tx, a Actor, id string, newPosition int) (bool, error) {
	key := category.OrderKey(a.MerchantID, a.Environment)
	order, err := Read(tx, CategoryOrderKind, key)
	if err != nil {
		return false, err
	}
	ev, moved, err := category.Move(order, a.MerchantID, a.Environment, id, newPosition)
	if err != nil || !moved {
		return false, err
	}
	Record(tx, CategoryOrderKind, key, ev)
	return true, nil
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
