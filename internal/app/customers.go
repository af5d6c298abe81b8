package app

import (
	"context"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/eventstore"
)

// The refusals of an email or phone another customer of the merchant
// holds, in the public API's words: onboarding code written for it
// recognises a returning customer by this text.
const (
	msgEmailTaken = "A customer with this email already exists under this merchant"
	msgPhoneTaken = "A customer with this phone already exists under this merchant"
)

// CreateCustomer creates a customer and reserves its email and phone in the
// same append, so two concurrent creates with one email cannot both succeed.
func (s *Service) CreateCustomer(ctx context.Context, a Actor, in customer.NewCustomer) (string, eventstore.Position, error) {
	id := s.newRecordID()
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		_, err := s.createCustomer(tx, a, id, in)
		return err
	})
	return id, res.Position, err
}

// createCustomer records customer id's creation in tx, with its email and
// phone reserved.
func (s *Service) createCustomer(tx *Tx, a Actor, id string, in customer.NewCustomer) (customer.State, error) {
	m, err := Read(tx, MerchantKind, a.MerchantID)
	if err != nil {
		return customer.State{}, err
	}
	if !m.Exists() {
		return customer.State{}, domain.Errorf(domain.NotFound, "Merchant not found")
	}
	created, err := customer.Create(id, a.MerchantID, a.Environment, m.Country, in, s.Engine.Now())
	if err != nil {
		return customer.State{}, err
	}
	emailKey, err := s.emailKey(tx, a, created.Email)
	if err != nil {
		return customer.State{}, err
	}
	phoneKey, err := s.phoneKey(tx, a, created.Phone)
	if err != nil {
		return customer.State{}, err
	}
	if err := reserveUnique(tx, emailKey, id, msgEmailTaken); err != nil {
		return customer.State{}, err
	}
	if err := reserveUnique(tx, phoneKey, id, msgPhoneTaken); err != nil {
		return customer.State{}, err
	}
	Record(tx, CustomerKind, id, created)
	return customer.Apply(customer.State{}, created), nil
}

// reserveUnique reserves a unique value for holder within tx, or fails with taken.
func reserveUnique(tx *Tx, key, holder, taken string) error {
	r, err := Read(tx, ReservationKind, key)
	if err != nil {
		return err
	}
	if r.Holder != "" && r.Holder != holder {
		return domain.Invalidf("%s", taken)
	}
	if r.Holder == holder {
		return nil
	}
	Record(tx, ReservationKind, key, customer.ReservationTaken{Holder: holder})
	return nil
}

// loadOwnCustomer reads a customer of the actor's merchant and environment.
func loadOwnCustomer(tx *Tx, a Actor, id string, foreign error) (customer.State, error) {
	c, err := Read(tx, CustomerKind, id)
	if err != nil {
		return c, err
	}
	if !c.Exists() || c.MerchantID != a.MerchantID || c.Environment != a.Environment {
		return c, foreign
	}
	return c, nil
}

// UpdateCustomer changes names or email; a new email moves the reservation.
func (s *Service) UpdateCustomer(ctx context.Context, a Actor, id string, in customer.Update) (eventstore.Position, error) {
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		c, err := loadOwnCustomer(tx, a, id, domain.Errorf(domain.Unauthenticated, "Access denied"))
		if err != nil {
			return err
		}
		ev, newEmail, err := customer.UpdateProfile(c, in, s.Engine.Now())
		if err != nil {
			return err
		}
		if newEmail != "" {
			key, err := s.emailKey(tx, a, newEmail)
			if err != nil {
				return err
			}
			if err := reserveUnique(tx, key, id, msgEmailTaken); err != nil {
				return err
			}
			old, err := s.emailKey(tx, a, c.Email)
			if err != nil {
				return err
			}
			if _, err := Read(tx, ReservationKind, old); err != nil {
				return err
			}
			Record(tx, ReservationKind, old, customer.ReservationReleased{Holder: id})
		}
		Record(tx, CustomerKind, id, ev)
		return nil
	})
	return res.Position, err
}

// SetPermissions replaces the given permissions (nil = unchanged).
func (s *Service) SetPermissions(ctx context.Context, a Actor, id string, canBuy, canSell, canWithdraw *bool) (eventstore.Position, error) {
	if canBuy == nil && canSell == nil && canWithdraw == nil {
		return eventstore.Position{}, domain.Invalidf("Provide at least one of canBuy, canSell or canWithdraw")
	}
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		c, err := loadOwnCustomer(tx, a, id, domain.Invalidf("Customer not found"))
		if err != nil {
			return err
		}
		p := c.Permissions
		for _, f := range []struct {
			v   *bool
			dst *bool
		}{{canBuy, &p.CanBuy}, {canSell, &p.CanSell}, {canWithdraw, &p.CanWithdraw}} {
			if f.v != nil {
				*f.dst = *f.v
			}
		}
		if p == c.Permissions {
			return ErrNothingToDo
		}
		Record(tx, CustomerKind, id, customer.PermissionsChanged{Permissions: p, UpdatedAt: s.Engine.Now()})
		return nil
	})
	return res.Position, err
}

// SetBlocked blocks or unblocks a customer; repeating is a no-op.
func (s *Service) SetBlocked(ctx context.Context, a Actor, id string, blocked bool, reason string) (eventstore.Position, error) {
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		c, err := loadOwnCustomer(tx, a, id, domain.Invalidf("Customer not found"))
		if err != nil {
			return err
		}
		if c.Blocked == blocked {
			return ErrNothingToDo
		}
		now := s.Engine.Now()
		if blocked {
			if len(reason) > 500 {
				return domain.Invalidf("reason must be at most 500 characters")
			}
			Record(tx, CustomerKind, id, customer.Blocked{Reason: reason, BlockedAt: now})
		} else {
			Record(tx, CustomerKind, id, customer.Unblocked{UnblockedAt: now})
		}
		return nil
	})
	return res.Position, err
}

// RecordErasure records that customer id's personal data is erased, with
// a (the operator) as the actor; the caller destroys their data key after
// it. Erasing an erased customer again records nothing (ErrNothingToDo).
func (s *Service) RecordErasure(ctx context.Context, a Actor, id string) (eventstore.Position, error) {
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		c, err := loadOwnCustomer(tx, a, id, domain.Invalidf("Customer not found"))
		if err != nil {
			return err
		}
		if c.Erased {
			return ErrNothingToDo
		}
		// Their email and phone are freed: a person who asked to be
		// forgotten may be registered again, and no lookup by contact
		// finds the erased record.
		if err := s.releaseContact(tx, a, id, c); err != nil {
			return err
		}
		Record(tx, CustomerKind, id, customer.Erased{ErasedAt: s.Engine.Now()})
		return nil
	})
	return res.Position, err
}

// releaseContact records in tx the release of the reservations customer
// c (id) holds for its email and phone. A value already erased names no
// reservation of theirs, and one held by someone else is left alone.
func (s *Service) releaseContact(tx *Tx, a Actor, id string, c customer.State) error {
	for _, v := range []struct {
		value string
		key   func(*Tx, Actor, string) (string, error)
	}{{c.Email, s.emailKey}, {c.Phone, s.phoneKey}} {
		if v.value == "" || v.value == domain.Erased {
			continue
		}
		key, err := v.key(tx, a, v.value)
		if err != nil {
			return err
		}
		r, err := Read(tx, ReservationKind, key)
		if err != nil {
			return err
		}
		if r.Holder == id {
			Record(tx, ReservationKind, key, customer.ReservationReleased{Holder: id})
		}
	}
	return nil
}

// emailKey and phoneKey name the reservation of a customer's email or
// phone: by the value's blind index when the service has one (BlindIndex),
// so the log's stream names never hold the value itself.
func (s *Service) emailKey(tx *Tx, a Actor, email string) (string, error) {
	v, err := s.blindIndex(tx.ctx, EmailPurpose, email)
	return customer.EmailKey(a.MerchantID, a.Environment, v), err
}

func (s *Service) phoneKey(tx *Tx, a Actor, phone string) (string, error) {
	v, err := s.blindIndex(tx.ctx, PhonePurpose, phone)
	return customer.PhoneKey(a.MerchantID, a.Environment, v), err
}

// The blind index purposes of the values that name streams: a customer's
// email and phone (their reservations), a payout's bank account (its
// recipient, as RecipientKey gives it) and a dedicated account's number
// (its link to the holder).
const (
	EmailPurpose     = "email"
	PhonePurpose     = "phone"
	RecipientPurpose = "recipient"
	AccountPurpose   = "account"
)

func (s *Service) blindIndex(ctx context.Context, purpose, value string) (string, error) {
	if s.BlindIndex == nil {
		return value, nil
	}
	return s.BlindIndex(ctx, purpose, value)
}

// CustomersByContact are the customers of a merchant's environment that
// hold email (its canonical form; "" for none) and any of phones, by
// their reservations: the lookup goes through the blind index, never a
// stored value.
func (s *Service) CustomersByContact(ctx context.Context, merchantID string, env domain.Environment, email string, phones []string) (byEmail string, byPhone []string, err error) {
	holder := func(purpose, value string, key func(string, domain.Environment, string) string) (string, error) {
		v, err := s.blindIndex(ctx, purpose, value)
		if err != nil {
			return "", err
		}
		r, _, err := Load(ctx, s.Engine, ReservationKind, key(merchantID, env, v))
		return r.Holder, err
	}
	if email != "" {
		if byEmail, err = holder(EmailPurpose, email, customer.EmailKey); err != nil {
			return "", nil, err
		}
	}
	for _, p := range phones {
		h, err := holder(PhonePurpose, p, customer.PhoneKey)
		if err != nil {
			return "", nil, err
		}
		if h != "" {
			byPhone = append(byPhone, h)
		}
	}
	return byEmail, byPhone, nil
}
