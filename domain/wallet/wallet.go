// Package wallet is a customer's wallet: the aggregate whose revision guards
// every debit. Each movement touching a customer's accounts is mirrored here
// as a Posted event in the same atomic append, so a debit is decided on the
// balance the append proves current and concurrent debits cannot overdraw.
//
// The movement itself (the balanced postings) lives in the event of the
// aggregate that caused it (a payment, an escrow); balances shown by the API
// are derived from those postings. The audit checks both agree.
package wallet

import (
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
)

// State is a customer's two balances.
type State struct {
	Main        money.Amount
	Escrow      money.Amount
	LastTopUpAt time.Time
	// TestDepositDay is the day (UTC) of the last test deposit, and
	// TestDeposited what test deposits credited that day.
	TestDepositDay time.Time
	TestDeposited  money.Amount
}

// Posted mirrors one movement's effect on this wallet.
type Posted struct {
	TransactionID string       `json:"transactionId"`
	Reference     string       `json:"reference"`
	Main          money.Amount `json:"main"`   // change of the main balance
	Escrow        money.Amount `json:"escrow"` // change of the escrow balance
	TopUp         bool         `json:"topUp,omitempty"`
	TestDeposit   bool         `json:"testDeposit,omitempty"`
	At            time.Time    `json:"at"`
}

func (Posted) EventType() string { return "wallet.posted" }

// Registry decodes wallet events.
var Registry = domain.NewRegistry(func() domain.Event { return &Posted{} })

// Apply folds a wallet event.
func Apply(s State, ev domain.Event) State {
	if e, ok := ev.(Posted); ok {
		s.Main += e.Main
		s.Escrow += e.Escrow
		if e.TopUp {
			s.LastTopUpAt = e.At
		}
		if e.TestDeposit {
			s.TestDeposited = s.testDepositedOn(e.At) + e.Main
			s.TestDepositDay = day(e.At)
		}
	}
	return s
}

// day is the UTC day of t.
func day(t time.Time) time.Time { return t.UTC().Truncate(24 * time.Hour) }

// testDepositedOn is what test deposits credited on at's day.
func (s State) testDepositedOn(at time.Time) money.Amount {
	if s.TestDepositDay.Equal(day(at)) {
		return s.TestDeposited
	}
	return 0
}

// Errors of the wallet's rules.
var (
	ErrInsufficient = domain.Invalidf("Insufficient balance")
	ErrTopUpTooSoon = domain.Errorf(domain.Unauthenticated, "You can only top up your account once a day")
	// ErrTestDepositsDailyLimit refuses a test deposit past
	// MaxTestDepositsPerDay.
	ErrTestDepositsDailyLimit = domain.Invalidf("Test deposits are limited to %s a day", MaxTestDepositsPerDay)
)

// MaxTestDepositsPerDay bounds what the built-in test gateway's deposits,
// confirmed without money behind them, credit one customer in a day (UTC).
var MaxTestDepositsPerDay = money.Naira(1_000_000)

// TopUpInterval is how often a customer may top up a test wallet.
const TopUpInterval = 24 * time.Hour

// Posting describes the transaction a movement belongs to.
type Posting struct {
	TransactionID string
	Reference     string
	TopUp         bool
	// TestDeposit marks a deposit of the built-in test gateway, bounded a
	// day (MaxTestDepositsPerDay).
	TestDeposit bool
	At          time.Time
}

// Post decides the wallet event for movement m: the change of customerID's
// main and escrow balances, refused when either would go below zero. It
// returns nil when the movement does not touch this wallet's balances.
func Post(s State, customerID string, m ledger.Movement, p Posting) (*Posted, error) {
	d := m.Deltas()
	main, escrow := d[ledger.CustomerMain(customerID)], d[ledger.CustomerEscrow(customerID)]
	if main == 0 && escrow == 0 && !p.TopUp && !p.TestDeposit {
		return nil, nil
	}
	if s.Main+main < 0 || s.Escrow+escrow < 0 {
		return nil, ErrInsufficient
	}
	if p.TopUp && !s.LastTopUpAt.IsZero() && p.At.Sub(s.LastTopUpAt) < TopUpInterval {
		return nil, ErrTopUpTooSoon
	}
	if p.TestDeposit && s.testDepositedOn(p.At)+main > MaxTestDepositsPerDay {
		return nil, ErrTestDepositsDailyLimit
	}
	return &Posted{TransactionID: p.TransactionID, Reference: p.Reference, Main: main, Escrow: escrow, TopUp: p.TopUp,
		TestDeposit: p.TestDeposit, At: p.At}, nil
}
