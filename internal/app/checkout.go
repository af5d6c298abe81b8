package app

import (
	"context"
	"crypto/rand"
	"fmt"
	"regexp"
	"strings"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/checkout"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/domain/wallet"
	"github.com/escrowd/escrowd/eventstore"
)

// ErrAccountDisabled refuses a blocked buyer, as auth does on the API.
var ErrAccountDisabled = domain.Errorf(domain.Unauthenticated, "Your account is disabled. Please contact support")

// MinCheckoutDeposit is the smallest deposit create-intent accepts; a
// smaller shortfall is topped up by this much.
const MinCheckoutDeposit = money.Amount(100_00)

// NewCheckoutID returns a session id: "cs_" and rand.Text's 26 base32
// characters, 130 random bits, so the page's URL cannot be guessed.
func NewCheckoutID() string { return "cs_" + rand.Text() }

var checkoutID = regexp.MustCompile(`^cs_[A-Z2-7]{26}$`)

// CheckoutRequest is a session to open, after decoding.
type CheckoutRequest struct {
	EscrowID, CustomerID  string
	SuccessURL, CancelURL string
	ExpiresInMinutes      int
}

// CheckoutResult is a session after a command, with the append's position.
type CheckoutResult struct {
	Session  checkout.State
	Position eventstore.Position
}

// OpenCheckout opens a session for a buyer of the actor's merchant to pay
// an escrow awaiting payment.
func (s *Service) OpenCheckout(ctx context.Context, a Actor, in CheckoutRequest) (CheckoutResult, error) {
	var out CheckoutResult
	id, token := NewCheckoutID(), rand.Text()
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		e, err := readEscrow(tx, a, in.EscrowID)
		if err != nil {
			return err
		}
		buyer, err := loadOwnCustomer(tx, a, in.CustomerID, domain.Errorf(domain.NotFound, "Customer not found"))
		if err != nil {
			return err
		}
		if err := checkBuyer(buyer); err != nil {
			return err
		}
		if err := escrow.CheckCheckout(e, buyer.ID); err != nil {
			return err
		}
		st, err := ReadNew(tx, CheckoutKind, id)
		if err != nil {
			return err
		}
		ev, err := checkout.OpenSession(st, checkout.Draft{ID: id, FormToken: token, MerchantID: a.MerchantID,
			Environment: a.Environment, EscrowID: e.ID, PaymentToken: e.PaymentToken, CustomerID: buyer.ID,
			AmountDue: e.Due(), SuccessURL: in.SuccessURL, CancelURL: in.CancelURL,
			ExpiresInMinutes: in.ExpiresInMinutes}, s.Engine.Now())
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

func checkBuyer(c customer.State) error {
	if c.Blocked {
		return ErrAccountDisabled
	}
	if !c.Permissions.CanBuy {
		return ErrAccessDenied
	}
	return nil
}

// OwnCheckout reads a session of the actor's merchant and environment.
func (s *Service) OwnCheckout(ctx context.Context, a Actor, id string) (checkout.State, error) {
	st, err := s.Checkout(ctx, id)
	if err == nil && (st.MerchantID != a.MerchantID || st.Environment != a.Environment) {
		return checkout.State{}, checkout.ErrNotFound
	}
	return st, err
}

// Checkout reads a session by its id alone (the page has no key: the
// unguessable id is the buyer's access).
func (s *Service) Checkout(ctx context.Context, id string) (checkout.State, error) {
	if !checkoutID.MatchString(id) {
		return checkout.State{}, checkout.ErrNotFound // not a session id: no store read
	}
	st, _, err := Load(ctx, s.Engine, CheckoutKind, id)
	if err == nil && !st.Exists() {
		err = checkout.ErrNotFound
	}
	return st, err
}

// CheckoutView is what the page shows: the session with the escrow, the
// merchant, the seller and the buyer's wallet as they are now.
type CheckoutView struct {
	Session    checkout.State
	Escrow     escrow.State
	Merchant   merchant.State
	SellerName string
	BuyerName  string
	Wallet     wallet.State
	// Shortfall is what the wallet lacks to pay the escrow's total due
	// (0 when it covers it).
	Shortfall money.Amount
	// Payment is the session's payment once paid.
	Payment *ledger.Record
}

// CheckoutPage reads everything the page of session id shows.
func (s *Service) CheckoutPage(ctx context.Context, id string) (CheckoutView, error) {
	var v CheckoutView
	st, err := s.Checkout(ctx, id)
	if err != nil {
		return v, err
	}
	if v, err = s.PaymentLink(ctx, st.EscrowID); err != nil {
		return v, err
	}
	v.Session = st
	buyer, _, err := Load(ctx, s.Engine, CustomerKind, st.CustomerID)
	if err != nil {
		return v, err
	}
	v.BuyerName = strings.TrimSpace(buyer.Firstname + " " + buyer.Lastname)
	if v.Wallet, _, err = Load(ctx, s.Engine, WalletKind, st.CustomerID); err != nil {
		return v, err
	}
	switch due := v.Escrow.Due(); {
	case st.DepositOnly:
		// Whoever typed the customer's email reaches this page: it shows
		// nothing of the customer's and asks for the whole amount.
		v.Wallet, v.BuyerName, v.Shortfall = wallet.State{}, "", due
	case v.Wallet.Main < due:
		v.Shortfall = due - v.Wallet.Main
	}
	if st.Reference != "" {
		p, _, err := Load(ctx, s.Engine, PaymentKind, payment.StreamID(st.MerchantID, st.Environment, st.Reference))
		if err != nil {
			return v, err
		}
		if p.Exists() {
			v.Payment = &p.Record
		}
	}
	return v, nil
}

// buyerOf is the session's merchant acting for its buyer, and the buyer's
// permissions as they are now (the page has no key; auth's customer checks
// are made here).
func (s *Service) buyerOf(ctx context.Context, st checkout.State) (Actor, customer.Permissions, error) {
	a := Actor{MerchantID: st.MerchantID, Environment: st.Environment, Agent: "checkout:" + st.ID}
	c, _, err := Load(ctx, s.Engine, CustomerKind, st.CustomerID)
	if err != nil {
		return a, customer.Permissions{}, err
	}
	return a, c.Permissions, checkBuyer(c)
}

// PayCheckout pays the session's escrow from the buyer's wallet with
// exactly the command of POST /v1/payment/escrow (PayEscrows: its rules,
// events and webhooks) under reference checkout_{id}. The session's
// payment is decided in the same tx and appended atomically with it, so a
// session that expired or was cancelled a moment before refuses it; a
// repeat (a double click, a second tab) returns the first payment.
// amount is the total the page showed: terms changed since refuse it.
func (s *Service) PayCheckout(ctx context.Context, id string, amount money.Amount) (PaymentResult, error) {
	return s.payCheckout(ctx, id, amount, "")
}

// payCheckout is PayCheckout, with the session's own deposit depositRef
// ("" for none) counted as what was deposited for it.
func (s *Service) payCheckout(ctx context.Context, id string, amount money.Amount, depositRef string) (PaymentResult, error) {
	st, err := s.Checkout(ctx, id)
	if err != nil {
		return PaymentResult{}, err
	}
	a, perms, err := s.buyerOf(ctx, st)
	if err != nil {
		return PaymentResult{}, err
	}
	in := EscrowPayment{Reference: checkout.Reference(id), Amount: amount, EscrowIDs: []string{st.EscrowID}}
	return s.payEscrows(ctx, a, st.CustomerID, perms, in, func(tx *Tx, p payment.State) error {
		cur, err := Read(tx, CheckoutKind, id)
		if err != nil {
			return err
		}
		var deposited money.Amount
		if depositRef != "" {
			d, err := ReadLatest(tx, PaymentKind, payment.StreamID(st.MerchantID, st.Environment, depositRef))
			if err != nil {
				return err
			}
			if d.Phase == payment.Done && d.Record.Status == ledger.Success && d.Record.CustomerID == st.CustomerID {
				deposited = d.Record.Amount - d.Record.Fee
			}
		}
		ev, err := checkout.Pay(cur, p.Record.ID, p.Record.Amount, deposited, s.Engine.Now())
		if err != nil {
			return err
		}
		Record(tx, CheckoutKind, id, ev)
		return nil
	})
}

// CancelCheckout is the buyer's cancelling an open session.
func (s *Service) CancelCheckout(ctx context.Context, id string) (CheckoutResult, error) {
	var out CheckoutResult
	st, err := s.Checkout(ctx, id)
	if err != nil {
		return out, err
	}
	a := Actor{MerchantID: st.MerchantID, Environment: st.Environment, Agent: "checkout:" + id}
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		cur, err := Read(tx, CheckoutKind, id)
		if err != nil {
			return err
		}
		ev, err := checkout.Cancel(cur, s.Engine.Now())
		if err != nil {
			return err
		}
		Record(tx, CheckoutKind, id, ev)
		out.Session = checkout.Apply(cur, ev)
		return nil
	})
	out.Position = res.Position
	return out, err
}

// checkoutDepositPrefix starts the reference of every deposit a session
// stages; the shortfall in kobo ends it, so the same shortfall stages the
// same deposit again and a different one a new deposit.
func checkoutDepositPrefix(id string) string { return checkout.Reference(id) + "_deposit_" }

// CheckoutDeposit stages (or finds again) a deposit of the buyer's
// shortfall, at least MinCheckoutDeposit, for an open session: on test the
// result carries the account to transfer to. Nothing moves until
// PayCheckoutAfterDeposit verifies it.
func (s *Service) CheckoutDeposit(ctx context.Context, id string, shortfall money.Amount) (IntentResult, error) {
	st, err := s.Checkout(ctx, id)
	if err != nil {
		return IntentResult{}, err
	}
	if err := checkout.CheckOpen(st, s.Engine.Now()); err != nil { // only an open session stages a deposit
		return IntentResult{}, err
	}
	a, perms, err := s.buyerOf(ctx, st)
	if err != nil {
		return IntentResult{}, err
	}
	amount := max(shortfall, MinCheckoutDeposit)
	return s.CreateIntent(ctx, a, st.CustomerID, perms, IntentRequest{Type: ledger.Deposit, Amount: amount,
		Reference: fmt.Sprintf("%s%d", checkoutDepositPrefix(id), amount.Kobo()),
		Narration: "Top-up for checkout " + id})
}

// PayCheckoutAfterDeposit verifies a deposit the session staged, then pays
// as PayCheckout. A session no longer open verifies nothing.
func (s *Service) PayCheckoutAfterDeposit(ctx context.Context, id, depositRef string, amount money.Amount) (PaymentResult, error) {
	st, err := s.Checkout(ctx, id)
	if err != nil {
		return PaymentResult{}, err
	}
	if !strings.HasPrefix(depositRef, checkoutDepositPrefix(id)) {
		return PaymentResult{}, payment.ErrNotFound
	}
	if st.StatusAt(s.Engine.Now()) == checkout.Open {
		a, perms, err := s.buyerOf(ctx, st)
		if err != nil {
			return PaymentResult{}, err
		}
		if _, _, err := s.Verify(ctx, a, st.CustomerID, perms, depositRef); err != nil {
			return PaymentResult{}, err
		}
	}
	return s.payCheckout(ctx, id, amount, depositRef)
}
