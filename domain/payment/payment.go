// Package payment is a payment intent: a deposit, a withdrawal or a wallet
// transfer a customer stages with create-intent and executes with verify.
// One stream per (merchant, environment, reference), so a reference can
// name only one intent and executing it twice is impossible: the second
// verify finds the intent settled and returns the stored outcome.
package payment

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
)

// StreamID is the payment stream id of a reference. The reference is hashed
// so any client string makes a well-formed stream name.
func StreamID(merchantID string, env domain.Environment, reference string) string {
	sum := sha256.Sum256([]byte(reference))
	return merchantID + "." + string(env) + "." + hex.EncodeToString(sum[:16])
}

// Phase is where an intent is in its life.
type Phase string

const (
	Staged    Phase = "staged"     // created, nothing moved
	PayingOut Phase = "paying_out" // withdrawal debited, payout in flight
	Done      Phase = "done"       // settled: success, failed or reversed
)

// TestAccount is where a test deposit is to be paid.
type TestAccount struct {
	BankName      string       `json:"bankName"`
	AccountNumber string       `json:"accountNumber"`
	AccountName   string       `json:"accountName"`
	Amount        money.Amount `json:"amount"`
}

// State is an intent.
type State struct {
	Phase       Phase
	Staged      ledger.Record    // the payer's record as staged: what the client asked for
	Record      ledger.Record    // the payer's record, as it stands
	Movement    *ledger.Movement // what executing it moved
	TestAccount *TestAccount
	// The payout lease of a withdrawal paying out: the verify holding it is
	// the only one that may ask the provider until LeaseUntil.
	LeaseHolder string
	LeaseUntil  time.Time
	// Accepted says the provider took the payout and its outcome is
	// awaited (since AcceptedAt); Transfer is the provider's id of it.
	Accepted   bool
	AcceptedAt time.Time
	Transfer   string
	// Unanswered counts the sends the provider did not answer (each gave
	// the lease up).
	Unanswered int
	// Collected through a provider: where the payer pays (a deposit's
	// dedicated account, an escrow payment's AuthorizationURL) and the
	// provider's reference of the charge that pays it (ChargeReference;
	// of a deposit, known once a transfer settled it).
	DepositAccount   *BankAccount
	AuthorizationURL string
	ChargeReference  string
}

// Exists reports whether the intent has been created.
func (s State) Exists() bool { return s.Phase != "" }

// Events.
type (
	// IntentCreated stages a payment; nothing moves.
	IntentCreated struct {
		Record      ledger.Record `json:"record"`
		TestAccount *TestAccount  `json:"testAccount,omitempty"`
		// DepositAccount is where a deposit collected through a provider
		// is to be transferred.
		DepositAccount *BankAccount `json:"depositAccount,omitempty"`
		// Charge is the payment started at the provider for an escrow
		// payment by card, bank or USSD.
		Charge *ChargeStart `json:"charge,omitempty"`
	}
	// Settled executes a deposit or a transfer (or records a failed
	// deposit, without a movement).
	Settled struct {
		Movement *ledger.Movement `json:"movement,omitempty"`
		Records  []ledger.Record  `json:"records"`
		// Charge is the provider's reference of the charge that settled
		// the intent, when one did.
		Charge string `json:"charge,omitempty"`
	}
	// PayoutStarted debits a withdrawal (amount to clearing, fee to the
	// platform) before the provider is asked to pay it out; the verify that
	// debits holds the payout lease (events stored before the lease existed
	// have none, and any verify may take it).
	PayoutStarted struct {
		Movement    ledger.Movement `json:"movement"`
		Record      ledger.Record   `json:"record"`
		LeaseHolder string          `json:"leaseHolder,omitempty"`
		LeaseUntil  time.Time       `json:"leaseUntil,omitzero"`
	}
	// PayoutLeased gives the payout step of a withdrawal paying out to one
	// verify (Holder) until Until: a verify that finds it paying out after
	// an interruption. Until not after At releases the lease (its holder's
	// provider did not answer, so the next verify may ask at once).
	PayoutLeased struct {
		Holder string    `json:"holder"`
		At     time.Time `json:"at"`
		Until  time.Time `json:"until"`
	}
	// PayoutAccepted records that the provider took the payout: the
	// withdrawal stays pending until its outcome comes, and is not sent
	// again. Transfer is the provider's id of the payout.
	PayoutAccepted struct {
		Transfer string    `json:"transfer,omitempty"`
		At       time.Time `json:"at"`
	}
	// PayoutCompleted records the provider's payout.
	PayoutCompleted struct {
		Record ledger.Record `json:"record"`
	}
	// PayoutFailed returns the whole debit of a payout the provider will
	// never pay to main (status failed).
	PayoutFailed struct {
		Movement ledger.Movement `json:"movement"`
		Record   ledger.Record   `json:"record"`
		Reason   string          `json:"reason,omitempty"`
	}
	// PayoutReversed returns the whole debit of a payout the provider
	// reversed to main (status reversed).
	PayoutReversed struct {
		Movement ledger.Movement `json:"movement"`
		Record   ledger.Record   `json:"record"`
		Reason   string          `json:"reason,omitempty"`
	}
)

func (IntentCreated) EventType() string   { return "payment.intent_created" }
func (Settled) EventType() string         { return "payment.settled" }
func (PayoutStarted) EventType() string   { return "payment.payout_started" }
func (PayoutCompleted) EventType() string { return "payment.payout_completed" }
func (PayoutReversed) EventType() string  { return "payment.payout_reversed" }
func (PayoutLeased) EventType() string    { return "payment.payout_leased" }
func (PayoutAccepted) EventType() string  { return "payment.payout_accepted" }
func (PayoutFailed) EventType() string    { return "payment.payout_failed" }

func (e IntentCreated) Ledger() ledger.Effect {
	return ledger.Effect{Records: []ledger.Record{e.Record}}
}
func (e Settled) Ledger() ledger.Effect {
	return ledger.Effect{Movement: e.Movement, Records: e.Records}
}
func (e PayoutStarted) Ledger() ledger.Effect {
	return ledger.Effect{Movement: &e.Movement, Records: []ledger.Record{e.Record}}
}
func (e PayoutCompleted) Ledger() ledger.Effect {
	return ledger.Effect{Records: []ledger.Record{e.Record}}
}
func (e PayoutFailed) Ledger() ledger.Effect {
	return ledger.Effect{Movement: &e.Movement, Records: []ledger.Record{e.Record}}
}
func (e PayoutReversed) Ledger() ledger.Effect {
	return ledger.Effect{Movement: &e.Movement, Records: []ledger.Record{e.Record}}
}

// Ledger: a lease, or the provider's acceptance, moves nothing and changes
// no record (the withdrawal stays pending).
func (PayoutLeased) Ledger() ledger.Effect   { return ledger.Effect{} }
func (PayoutAccepted) Ledger() ledger.Effect { return ledger.Effect{} }

// Registry decodes payment events.
var Registry = domain.NewRegistry(
	func() domain.Event { return &IntentCreated{} },
	func() domain.Event { return &Settled{} },
	func() domain.Event { return &PayoutStarted{} },
	func() domain.Event { return &PayoutCompleted{} },
	func() domain.Event { return &PayoutReversed{} },
	func() domain.Event { return &PayoutLeased{} },
	func() domain.Event { return &PayoutAccepted{} },
	func() domain.Event { return &PayoutFailed{} },
)

// Apply folds a payment event.
func Apply(s State, ev domain.Event) State {
	switch e := ev.(type) {
	case IntentCreated:
		s = State{Phase: Staged, Staged: e.Record, Record: e.Record, TestAccount: e.TestAccount, DepositAccount: e.DepositAccount}
		if e.Charge != nil {
			s.ChargeReference, s.AuthorizationURL = e.Charge.Reference, e.Charge.AuthorizationURL
		}
	case Settled:
		s.Phase, s.Movement = Done, e.Movement
		if e.Charge != "" {
			s.ChargeReference = e.Charge
		}
		// A transfer's receiving record is in the event (and the receiver's
		// wallet); the payment's state keeps only its own.
		for _, r := range e.Records {
			if r.ID == s.Record.ID {
				s.Record = r
			}
		}
	case PayoutStarted:
		m := e.Movement
		s.Phase, s.Movement, s.Record = PayingOut, &m, e.Record
		s.LeaseHolder, s.LeaseUntil = e.LeaseHolder, e.LeaseUntil
	case PayoutLeased:
		s.LeaseHolder, s.LeaseUntil = e.Holder, e.Until
		if !e.Until.After(e.At) {
			// Given up: held by nobody, so the next verify takes it however
			// far its clock is behind the releaser's.
			s.LeaseHolder, s.LeaseUntil = "", time.Time{}
			s.Unanswered++
		}
	case PayoutAccepted:
		s.Accepted, s.AcceptedAt, s.Transfer = true, e.At, e.Transfer
		s.LeaseHolder, s.LeaseUntil = "", time.Time{}
	case PayoutCompleted:
		s.Phase, s.Record = Done, e.Record
	case PayoutFailed:
		s.Phase, s.Record = Done, e.Record
	case PayoutReversed:
		s.Phase, s.Record = Done, e.Record
	}
	return s
}
