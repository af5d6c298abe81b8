// Package checkout is the hosted checkout session: a
// single-use, expiring permission for one buyer to pay one escrow from a
// page the service serves. The session is an aggregate of its own, so its
// payment is recorded in the same atomic append as the escrow payment: a
// session that expired or was cancelled a moment earlier refuses it.
package checkout

import (
	"net/url"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/money"
)

// Status of a session as the API shows it.
type Status string

const (
	Open      Status = "open"
	Complete  Status = "complete"
	Expired   Status = "expired"
	Cancelled Status = "cancelled"
)

// Lifetimes a merchant may ask for, in minutes.
const (
	MinMinutes     = 5
	MaxMinutes     = 1440
	DefaultMinutes = 60
)

// Errors. A session that can no longer pay is Gone (410), an unknown one
// NotFound (404).
var (
	ErrNotFound        = domain.Errorf(domain.NotFound, "Checkout session not found")
	ErrExpired         = domain.Errorf(domain.Gone, "Checkout session has expired")
	ErrUsed            = domain.Errorf(domain.Gone, "Checkout session has already been paid")
	ErrCancelled       = domain.Errorf(domain.Gone, "Checkout session was cancelled")
	ErrBadLifetime     = domain.Invalidf("expiresInMinutes must be an integer from 5 to 1440")
	ErrBadSuccessURL   = domain.Invalidf("successUrl must be an absolute http or https URL")
	ErrBadCancelURL    = domain.Invalidf("cancelUrl must be an absolute http or https URL")
	ErrAlreadyOpened   = domain.Errorf(domain.Conflict, "Checkout session already exists")
	ErrMissingEscrow   = domain.Invalidf("paymentToken is required")
	ErrMissingCustomer = domain.Invalidf("customerId is required")
	ErrDepositOnly     = domain.Errorf(domain.Forbidden, "This checkout is paid by a transfer made for it, not from a wallet's balance")
)

// State is the folded session.
type State struct {
	ID           string             `json:"id"`
	MerchantID   string             `json:"merchantId"`
	Environment  domain.Environment `json:"environment"`
	EscrowID     string             `json:"escrowId"`
	PaymentToken string             `json:"paymentToken"`
	CustomerID   string             `json:"customerId"`
	AmountDue    money.Amount       `json:"amountDue"`
	SuccessURL   string             `json:"successUrl"`
	CancelURL    string             `json:"cancelUrl"`
	// DepositOnly sessions pay only with money deposited for them: never
	// from the balance the buyer's wallet held. A payment link opens such
	// sessions, since whoever types a customer's email there reaches the
	// page.
	DepositOnly bool `json:"depositOnly,omitempty"`
	// FormToken is the per-session anti-forgery token every form of the
	// page carries back.
	FormToken   string    `json:"formToken"`
	CreatedAt   time.Time `json:"createdAt"`
	ExpiresAt   time.Time `json:"expiresAt"`
	Reference   string    `json:"reference,omitempty"` // the payment's, once paid
	PaidAt      time.Time `json:"paidAt,omitempty"`
	CancelledAt time.Time `json:"cancelledAt,omitempty"`
}

// Exists reports whether the session was opened.
func (s State) Exists() bool { return s.ID != "" }

// StatusAt is the session's status at now: expiry needs no event, it is
// the clock passing ExpiresAt while the session is still open.
func (s State) StatusAt(now time.Time) Status {
	switch {
	case !s.PaidAt.IsZero():
		return Complete
	case !s.CancelledAt.IsZero():
		return Cancelled
	case !now.Before(s.ExpiresAt):
		return Expired
	}
	return Open
}

// Reference is the payment reference a session pays under.
func Reference(id string) string { return "checkout_" + id }

// Events.
type (
	Opened struct {
		ID           string             `json:"id"`
		MerchantID   string             `json:"merchantId"`
		Environment  domain.Environment `json:"environment"`
		EscrowID     string             `json:"escrowId"`
		PaymentToken string             `json:"paymentToken"`
		CustomerID   string             `json:"customerId"`
		AmountDue    money.Amount       `json:"amountDue"`
		SuccessURL   string             `json:"successUrl"`
		CancelURL    string             `json:"cancelUrl"`
		DepositOnly  bool               `json:"depositOnly,omitempty"`
		FormToken    string             `json:"formToken"`
		At           time.Time          `json:"at"`
		ExpiresAt    time.Time          `json:"expiresAt"`
	}
	Paid struct {
		Reference string    `json:"reference"`
		PaymentID string    `json:"paymentId"`
		At        time.Time `json:"at"`
	}
	CancelledByBuyer struct {
		At time.Time `json:"at"`
	}
)

func (Opened) EventType() string           { return "checkout.opened" }
func (Paid) EventType() string             { return "checkout.paid" }
func (CancelledByBuyer) EventType() string { return "checkout.cancelled" }

// Registry decodes checkout events.
var Registry = domain.NewRegistry(
	func() domain.Event { return &Opened{} },
	func() domain.Event { return &Paid{} },
	func() domain.Event { return &CancelledByBuyer{} },
)

// Apply folds one event.
func Apply(s State, ev domain.Event) State {
	switch e := ev.(type) {
	case Opened:
		s = State{ID: e.ID, MerchantID: e.MerchantID, Environment: e.Environment, EscrowID: e.EscrowID,
			PaymentToken: e.PaymentToken, CustomerID: e.CustomerID, AmountDue: e.AmountDue, SuccessURL: e.SuccessURL,
			CancelURL: e.CancelURL, DepositOnly: e.DepositOnly, FormToken: e.FormToken, CreatedAt: e.At, ExpiresAt: e.ExpiresAt}
	case Paid:
		s.Reference, s.PaidAt = e.Reference, e.At
	case CancelledByBuyer:
		s.CancelledAt = e.At
	}
	return s
}

// Draft is an open request after decoding; ExpiresInMinutes 0 takes the
// default.
type Draft struct {
	ID, FormToken          string
	MerchantID             string
	Environment            domain.Environment
	EscrowID, PaymentToken string
	CustomerID             string
	AmountDue              money.Amount
	SuccessURL, CancelURL  string
	ExpiresInMinutes       int
	DepositOnly            bool
}

// CheckLifetime validates a requested lifetime (0: the default).
func CheckLifetime(minutes int) error {
	if minutes != 0 && (minutes < MinMinutes || minutes > MaxMinutes) {
		return ErrBadLifetime
	}
	return nil
}

// ValidReturnURL reports whether u may be a success or cancel URL: empty,
// or absolute http(s) with a host. Anything else (javascript:, a relative
// path) would let a session send the buyer somewhere the page cannot vouch
// for.
func ValidReturnURL(u string) bool {
	if u == "" {
		return true
	}
	p, err := url.Parse(u)
	return err == nil && (p.Scheme == "https" || p.Scheme == "http") && p.Host != "" && p.User == nil
}

// OpenSession decides opening a session. The escrow and the buyer are
// checked by the caller against their own aggregates.
func OpenSession(s State, d Draft, now time.Time) (Opened, error) {
	switch {
	case s.Exists():
		return Opened{}, ErrAlreadyOpened
	case d.EscrowID == "":
		return Opened{}, ErrMissingEscrow
	case d.CustomerID == "":
		return Opened{}, ErrMissingCustomer
	}
	if err := domain.CheckURLLength("successUrl", d.SuccessURL); err != nil {
		return Opened{}, err
	}
	if err := domain.CheckURLLength("cancelUrl", d.CancelURL); err != nil {
		return Opened{}, err
	}
	switch {
	case !ValidReturnURL(d.SuccessURL):
		return Opened{}, ErrBadSuccessURL
	case !ValidReturnURL(d.CancelURL):
		return Opened{}, ErrBadCancelURL
	}
	if err := CheckLifetime(d.ExpiresInMinutes); err != nil {
		return Opened{}, err
	}
	minutes := d.ExpiresInMinutes
	if minutes == 0 {
		minutes = DefaultMinutes
	}
	return Opened{ID: d.ID, MerchantID: d.MerchantID, Environment: d.Environment, EscrowID: d.EscrowID,
		PaymentToken: d.PaymentToken, CustomerID: d.CustomerID, AmountDue: d.AmountDue, SuccessURL: d.SuccessURL,
		CancelURL: d.CancelURL, DepositOnly: d.DepositOnly, FormToken: d.FormToken, At: now,
		ExpiresAt: now.Add(time.Duration(minutes) * time.Minute)}, nil
}

// CheckOpen refuses a session that cannot act at now.
func CheckOpen(s State, now time.Time) error {
	if !s.Exists() {
		return ErrNotFound
	}
	switch s.StatusAt(now) {
	case Complete:
		return ErrUsed
	case Cancelled:
		return ErrCancelled
	case Expired:
		return ErrExpired
	}
	return nil
}

// Pay decides the session's payment of amount under its reference: only
// an open session, before it expires, pays, and only once. deposited is
// what the deposit the session staged brought in, verified (0 when none):
// a DepositOnly session pays only what that covers.
func Pay(s State, paymentID string, amount, deposited money.Amount, now time.Time) (Paid, error) {
	if err := CheckOpen(s, now); err != nil {
		return Paid{}, err
	}
	if s.DepositOnly && deposited < amount {
		return Paid{}, ErrDepositOnly
	}
	return Paid{Reference: Reference(s.ID), PaymentID: paymentID, At: now}, nil
}

// ChargeReference is the reference of the session's payment at a
// provider by gateway (card, bank, ussd): one per gateway, so each
// gateway's page is asked for once and shown again on a repeat.
func ChargeReference(id, gateway string) string { return Reference(id) + "_" + gateway }

// PayByCharge decides the session's payment by a provider's charge, the
// payment reference (ChargeReference): money paid for this session, so
// a DepositOnly session takes it too; only an open session, before it
// expires, pays, and only once.
func PayByCharge(s State, reference, paymentID string, now time.Time) (Paid, error) {
	if err := CheckOpen(s, now); err != nil {
		return Paid{}, err
	}
	return Paid{Reference: reference, PaymentID: paymentID, At: now}, nil
}

// Cancel decides the buyer's cancelling an open session.
func Cancel(s State, now time.Time) (CancelledByBuyer, error) {
	if err := CheckOpen(s, now); err != nil {
		return CancelledByBuyer{}, err
	}
	return CancelledByBuyer{At: now}, nil
}
