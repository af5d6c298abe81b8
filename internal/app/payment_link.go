package app

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/checkout"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/escrow"
)

// ErrLinkBuyerRefused answers a payment link's buyer whom the merchant's
// rules do not let pay (blocked, not allowed to buy, the escrow's own
// seller), in one message that says nothing of the customer record.
var ErrLinkBuyerRefused = domain.Errorf(domain.Forbidden, "These details cannot be used to pay this escrow. Contact the merchant.")

// PaymentLink reads what a payment link's page shows of escrow id (found
// by its payment token; deleted escrows included, the page says it can no
// longer be paid): its terms, the merchant and the seller, nothing of any
// buyer (the view's session, buyer and wallet stay empty).
func (s *Service) PaymentLink(ctx context.Context, escrowID string) (CheckoutView, error) {
	var v CheckoutView
	e, _, err := Load(ctx, s.Engine, EscrowKind, escrowID)
	if err != nil {
		return v, err
	}
	if !e.Exists() {
		return v, escrow.ErrNotFound
	}
	if v.Merchant, _, err = Load(ctx, s.Engine, MerchantKind, e.MerchantID); err != nil {
		return v, err
	}
	v.Escrow, v.SellerName = e, v.Merchant.Name
	if !e.IsMerchantSale() {
		seller, _, err := Load(ctx, s.Engine, CustomerKind, e.SellerID)
		if err != nil {
			return v, err
		}
		v.SellerName = strings.TrimSpace(seller.Firstname + " " + seller.Lastname)
	}
	return v, nil
}

// OpenLinkCheckout is a payment link's buyer giving their details: the
// merchant's customer with that email (created with these details when
// there is none) gets a checkout session for the escrow, in one append.
// The session is DepositOnly: the link is keyless, so whoever types an
// email here must not reach that customer's balance; the session pays
// with a deposit made for it.
func (s *Service) OpenLinkCheckout(ctx context.Context, escrowID string, in customer.NewCustomer) (CheckoutResult, error) {
	var out CheckoutResult
	e, _, err := Load(ctx, s.Engine, EscrowKind, escrowID)
	if err != nil {
		return out, err
	}
	if !e.Exists() {
		return out, escrow.ErrNotFound
	}
	email, err := customer.NormalizeEmail(in.Email)
	if err != nil {
		return out, err
	}
	a := Actor{MerchantID: e.MerchantID, Environment: e.Environment, Agent: "payment-link:" + e.PaymentToken}
	id, token := NewCheckoutID(), rand.Text()
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		cur, err := readEscrow(tx, a, escrowID)
		if err != nil {
			return err
		}
		name, err := s.emailKey(tx, a, email)
		if err != nil {
			return err
		}
		key, err := Read(tx, ReservationKind, name)
		if err != nil {
			return err
		}
		var buyer customer.State
		if key.Holder != "" {
			if buyer, err = loadOwnCustomer(tx, a, key.Holder, escrow.ErrNotFound); err != nil {
				return err
			}
		} else if buyer, err = s.createCustomer(tx, a, s.newRecordID(), in); err != nil {
			return err
		}
		switch err := escrow.CheckCheckout(cur, buyer.ID); {
		case errors.Is(err, escrow.ErrOwnEscrow):
			return ErrLinkBuyerRefused
		case err != nil:
			return err // no longer payable: the escrow's own refusal
		}
		if checkBuyer(buyer) != nil {
			return ErrLinkBuyerRefused
		}
		st, err := ReadNew(tx, CheckoutKind, id)
		if err != nil {
			return err
		}
		ev, err := checkout.OpenSession(st, checkout.Draft{ID: id, FormToken: token, MerchantID: a.MerchantID,
			Environment: a.Environment, EscrowID: cur.ID, PaymentToken: cur.PaymentToken, CustomerID: buyer.ID,
			AmountDue: cur.Due(), DepositOnly: true}, s.Engine.Now())
		if err != nil {
			return err
		}
		Record(tx, CheckoutKind, id, ev)
		out.Session = checkout.Apply(st, ev)
		return nil
	})
	out.Position = res.Position
	return out, err
}
