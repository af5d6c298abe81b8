package payment

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
	"unicode/utf8"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
)

// Collections: money a payment provider receives for a customer, either
// by a bank transfer into the customer's dedicated account (a deposit) or
// by a payment the payer completes on the provider's page (a card, bank
// or USSD payment of an escrow). Each provider charge has a stream of its
// own (ChargeID), so a charge can be applied once whatever asks for it:
// its event, delivered any number of times to any instance, a verify, or
// reconciliation.

// ChargeStatus is where a provider charge stands, in the provider's words
// translated by its adapter.
type ChargeStatus string

const (
	ChargeSucceeded ChargeStatus = "succeeded" // the money was received
	ChargeFailed    ChargeStatus = "failed"    // it never will be (failed, abandoned, reversed)
	ChargePending   ChargeStatus = "pending"   // not yet known
)

// ProviderCharge is a charge as the provider answers it when asked (never
// as an event's body describes it).
type ProviderCharge struct {
	Reference string
	Status    ChargeStatus
	Amount    money.Amount // what the payer paid
	Fee       money.Amount // the provider's fee, kept out of the settlement
	// Channel is the provider's word for how it was paid (card, bank,
	// ussd, dedicated_nuban).
	Channel string
	// Account is, for a transfer into a dedicated account, that account's
	// number ("" otherwise).
	Account string
	At      time.Time
}

// BankAccount is where a customer transfers money to be credited.
type BankAccount struct {
	BankName      string `json:"bankName"`
	AccountNumber string `json:"accountNumber"`
	AccountName   string `json:"accountName"`
}

// ChargeStart is a payment started at the provider: its reference there
// and the page the payer completes it on.
type ChargeStart struct {
	Reference        string `json:"reference"`
	AuthorizationURL string `json:"authorizationUrl"`
}

// DepositAccount is a customer's dedicated account at the provider, and
// the deposit intents waiting for a transfer into it.
type DepositAccount struct {
	ProviderCustomer string
	Account          *BankAccount // nil until opened
	Awaited          []AwaitedDeposit
}

// AwaitedDeposit is a staged deposit intent, settled by the first
// transfer of exactly its amount credited after it was staged.
type AwaitedDeposit struct {
	Reference string       `json:"reference"`
	Amount    money.Amount `json:"amount"`
	At        time.Time    `json:"at"`
}

// Events of a deposit account.
type (
	// DepositAccountOpened records the provider's customer and dedicated
	// account of a customer.
	DepositAccountOpened struct {
		MerchantID       string             `json:"merchantId"`
		CustomerID       string             `json:"customerId"`
		Environment      domain.Environment `json:"environment"`
		ProviderCustomer string             `json:"providerCustomer"`
		Account          BankAccount        `json:"account"`
	}
	// DepositAwaited records a deposit intent waiting for its transfer.
	DepositAwaited AwaitedDeposit
	// DepositMatched: the awaited deposit Reference was settled by the
	// transfer Charge (a provider reference), or dropped as stale (Charge
	// empty: its intent no longer awaits a transfer).
	DepositMatched struct {
		Reference string `json:"reference"`
		Charge    string `json:"charge"`
	}
	// DepositLapsed drops the awaited deposit Reference, whose lifetime
	// had passed at At with no transfer matching it.
	DepositLapsed struct {
		Reference string    `json:"reference"`
		At        time.Time `json:"at"`
	}
)

func (DepositAccountOpened) EventType() string { return "depositaccount.opened" }
func (DepositAwaited) EventType() string       { return "depositaccount.deposit_awaited" }
func (DepositMatched) EventType() string       { return "depositaccount.deposit_matched" }
func (DepositLapsed) EventType() string        { return "depositaccount.deposit_lapsed" }

// DepositAccountRegistry decodes deposit account events.
var DepositAccountRegistry = domain.NewRegistry(
	func() domain.Event { return &DepositAccountOpened{} },
	func() domain.Event { return &DepositAwaited{} },
	func() domain.Event { return &DepositMatched{} },
	func() domain.Event { return &DepositLapsed{} },
)

// ApplyDepositAccount folds a deposit account event; the first opening
// stands.
func ApplyDepositAccount(s DepositAccount, ev domain.Event) DepositAccount {
	switch e := ev.(type) {
	case DepositAccountOpened:
		if s.Account == nil {
			acct := e.Account
			s.Account, s.ProviderCustomer = &acct, e.ProviderCustomer
		}
	case DepositAwaited:
		s.Awaited = append(append([]AwaitedDeposit(nil), s.Awaited...), AwaitedDeposit(e))
	case DepositMatched:
		s.Awaited = dropAwaited(s.Awaited, e.Reference)
	case DepositLapsed:
		s.Awaited = dropAwaited(s.Awaited, e.Reference)
	}
	return s
}

func dropAwaited(awaited []AwaitedDeposit, reference string) []AwaitedDeposit {
	kept := make([]AwaitedDeposit, 0, len(awaited))
	for _, a := range awaited {
		if a.Reference != reference {
			kept = append(kept, a)
		}
	}
	return kept
}

// Bounds of a deposit account's awaited entries. A deposit intent offers
// the dedicated account for AwaitedDepositLifetime: a transfer credited
// later is a deposit of its own (the money is never held back), the
// intent fails when verified (LapseDeposit), and the entry is dropped by
// that verify or the next staging, whichever comes first. At most
// MaxAwaitedDeposits entries await at once per account, so the account's
// state stays bounded however many intents are never paid.
const (
	AwaitedDepositLifetime = 72 * time.Hour
	MaxAwaitedDeposits     = 20
)

// ErrTooManyAwaited refuses a deposit intent while MaxAwaitedDeposits
// others still await a transfer into the same account.
var ErrTooManyAwaited = domain.Invalidf("Too many deposits are awaiting a transfer; pay one or wait for it to lapse")

// Lapsed reports whether the entry's lifetime has passed at at.
func (a AwaitedDeposit) Lapsed(at time.Time) bool {
	return !at.Before(a.At.Add(AwaitedDepositLifetime))
}

// Await decides staging the deposit d to await a transfer into the
// account at now: every entry lapsed by now is dropped (DepositLapsed),
// then d is awaited (DepositAwaited), refused with ErrTooManyAwaited when
// MaxAwaitedDeposits entries still await.
func Await(s DepositAccount, d AwaitedDeposit, now time.Time) ([]domain.Event, error) {
	var out []domain.Event
	live := 0
	for _, a := range s.Awaited {
		if a.Lapsed(now) {
			out = append(out, DepositLapsed{Reference: a.Reference, At: now})
			continue
		}
		live++
	}
	if live >= MaxAwaitedDeposits {
		return nil, ErrTooManyAwaited
	}
	return append(out, DepositAwaited(d)), nil
}

// LapseDeposit decides a deposit intent awaiting a transfer into acct
// whose lifetime has passed at now with no transfer matching it: the
// intent fails (nothing moved) and its entry, if still there, is dropped.
// Any other intent, or one still within its lifetime, gives nil.
func LapseDeposit(p State, acct DepositAccount, now time.Time) (*Settled, *DepositLapsed) {
	r := p.Record
	if p.Phase != Staged || r.Type != ledger.Deposit || p.DepositAccount == nil ||
		!(AwaitedDeposit{At: r.CreatedAt}).Lapsed(now) {
		return nil, nil
	}
	r.Status, r.UpdatedAt = ledger.Failed, now
	settled := &Settled{Records: []ledger.Record{r}}
	for _, a := range acct.Awaited {
		if a.Reference == r.Reference {
			return settled, &DepositLapsed{Reference: r.Reference, At: now}
		}
	}
	return settled, nil
}

// Match is the awaited deposit a transfer of amount received at settles:
// the oldest of exactly that amount staged before it and not lapsed.
func (s DepositAccount) Match(amount money.Amount, at time.Time) (AwaitedDeposit, bool) {
	for _, a := range s.Awaited {
		if a.Amount == amount && !a.At.After(at) && !a.Lapsed(at) {
			return a, true
		}
	}
	return AwaitedDeposit{}, false
}

// AccountLink names the holder of a dedicated account, so that a transfer
// into it (which names only the account) finds its customer.
type AccountLink struct {
	MerchantID string
	CustomerID string
}

// Exists reports whether the account is linked.
func (l AccountLink) Exists() bool { return l.CustomerID != "" }

// AccountLinked links a dedicated account to its holder.
type AccountLinked struct {
	MerchantID string `json:"merchantId"`
	CustomerID string `json:"customerId"`
}

func (AccountLinked) EventType() string { return "accountlink.linked" }

// AccountLinkRegistry decodes account link events.
var AccountLinkRegistry = domain.NewRegistry(func() domain.Event { return &AccountLinked{} })

// ApplyAccountLink folds an account link event; the first link stands.
func ApplyAccountLink(l AccountLink, ev domain.Event) AccountLink {
	if e, ok := ev.(AccountLinked); ok && !l.Exists() {
		l = AccountLink(e)
	}
	return l
}

// AccountLinkID is the account link stream id of the dedicated account
// whose number has the blind index index (a stream name is kept forever
// and read by whoever reads the log; an account number is personal).
func AccountLinkID(env domain.Environment, index string) string {
	return string(env) + "." + index
}

// Charge is one provider charge, as this service knows it.
type Charge struct {
	// Of a payment started here (an escrow paid by card, bank or USSD):
	// the payment's merchant, payer and reference.
	MerchantID string
	CustomerID string
	Reference  string
	// Applied says the charge's money is in the ledger (Amount, of which
	// Fee was the provider's), whatever it did.
	Applied bool
	Amount  money.Amount
	Fee     money.Amount
}

// Started reports whether the charge is a payment started here.
func (c Charge) Started() bool { return c.Reference != "" }

// Events of a charge.
type (
	// ChargeStarted records a payment started at the provider for the
	// intent Reference, before the payer can complete it.
	ChargeStarted struct {
		MerchantID string `json:"merchantId"`
		CustomerID string `json:"customerId"`
		Reference  string `json:"reference"`
	}
	// ChargeApplied puts a verified charge's money in the ledger, once.
	// When it settled an intent (Intent), the intent's Settled carries the
	// movement and this event none; otherwise Movement credits the
	// customer and Records is the deposit record.
	ChargeApplied struct {
		MerchantID string           `json:"merchantId"`
		CustomerID string           `json:"customerId"`
		Intent     string           `json:"intent,omitempty"`
		Amount     money.Amount     `json:"amount"`
		Fee        money.Amount     `json:"fee"`
		Movement   *ledger.Movement `json:"movement,omitempty"`
		Records    []ledger.Record  `json:"records,omitempty"`
	}
)

func (ChargeStarted) EventType() string { return "charge.started" }
func (ChargeApplied) EventType() string { return "charge.applied" }

func (e ChargeApplied) Ledger() ledger.Effect {
	return ledger.Effect{Movement: e.Movement, Records: e.Records}
}

// ChargeRegistry decodes charge events.
var ChargeRegistry = domain.NewRegistry(
	func() domain.Event { return &ChargeStarted{} },
	func() domain.Event { return &ChargeApplied{} },
)

// ApplyCharge folds a charge event.
func ApplyCharge(c Charge, ev domain.Event) Charge {
	switch e := ev.(type) {
	case ChargeStarted:
		c.MerchantID, c.CustomerID, c.Reference = e.MerchantID, e.CustomerID, e.Reference
	case ChargeApplied:
		c.Applied, c.Amount, c.Fee = true, e.Amount, e.Fee
		if c.MerchantID == "" {
			c.MerchantID, c.CustomerID = e.MerchantID, e.CustomerID
		}
	}
	return c
}

// ChargeID is the charge stream id of a provider reference: the
// provider's references are unique within one of its environments.
func ChargeID(env domain.Environment, providerReference string) string {
	sum := sha256.Sum256([]byte(providerReference))
	return string(env) + "." + hex.EncodeToString(sum[:16])
}

// Errors of collections.
var (
	// ErrChargeNotPaid: the provider does not say the charge succeeded;
	// nothing moves.
	ErrChargeNotPaid = domain.Invalidf("The payment has not been received")
	// ErrChargeMalformed: the provider's answer cannot be money (a
	// negative fee, a fee above the amount).
	ErrChargeMalformed = domain.Errorf(domain.Internal, "payment: the provider's charge is malformed")
)

// checkPaid refuses a charge that is not a received payment.
func checkPaid(pc ProviderCharge) error {
	if pc.Status != ChargeSucceeded {
		return ErrChargeNotPaid
	}
	if pc.Amount <= 0 || pc.Fee < 0 || pc.Fee > pc.Amount || utf8.RuneCountInString(pc.Reference) > MaxProviderReference {
		return ErrChargeMalformed
	}
	return nil
}

// ChargeMovement is what receiving a charge moves: the whole amount from
// clearing to the customer's main balance, and the provider's fee, which
// the provider kept, from the platform's processing costs back to
// clearing, so that clearing nets what the provider settles.
func ChargeMovement(merchantID string, env domain.Environment, customerID string, pc ProviderCharge) ledger.Movement {
	m := ledger.Movement{MerchantID: merchantID, Environment: env}
	m.Move(ledger.ExternalClearing(merchantID), ledger.CustomerMain(customerID), pc.Amount)
	m.Move(ledger.PlatformCost(merchantID), ledger.ExternalClearing(merchantID), pc.Fee)
	return m
}

// Credit is what a verified charge does to the ledger: events for the
// charge's stream and, when it settles an intent, the intent's and the
// deposit account's.
type Credit struct {
	Applied ChargeApplied
	// Intent settles the intent the charge belongs to (nil: none).
	Intent *Settled
	// Matched takes an awaited deposit off the deposit account (nil:
	// none).
	Matched *DepositMatched
}

// CreditDeposit decides a verified transfer into holder's dedicated
// account: the deposit intent it matches (intent, staged and awaited;
// nil when none) is settled by it, with the charge's money; otherwise a
// deposit record of its own (recordID, the provider's reference)
// credits the customer (and an awaited entry whose intent is no longer
// an awaited deposit of that amount is dropped). A charge already applied
// does nothing (nil).
func CreditDeposit(c Charge, pc ProviderCharge, holder AccountLink, env domain.Environment, intent *State, recordID string, at time.Time) (*Credit, error) {
	if c.Applied {
		return nil, nil
	}
	if err := checkPaid(pc); err != nil {
		return nil, err
	}
	if !holder.Exists() {
		return nil, domain.Errorf(domain.Internal, "payment: no holder of the charge's account")
	}
	m := ChargeMovement(holder.MerchantID, env, holder.CustomerID, pc)
	out := &Credit{Applied: ChargeApplied{MerchantID: holder.MerchantID, CustomerID: holder.CustomerID, Amount: pc.Amount, Fee: pc.Fee}}
	if intent != nil && (intent.Phase != Staged || intent.Record.Type != ledger.Deposit || intent.Record.Amount != pc.Amount ||
		intent.Record.CustomerID != holder.CustomerID) {
		// The awaited entry is stale (its intent settled or changed by
		// another path): it is dropped, and the transfer is credited as a
		// deposit of its own, so that money received is never held back
		// by an entry that can no longer match.
		out.Matched = &DepositMatched{Reference: intent.Record.Reference}
		intent = nil
	}
	if intent != nil {
		r := intent.Record
		r.Status, r.UpdatedAt = ledger.Success, at
		out.Intent = &Settled{Movement: &m, Records: []ledger.Record{r}, Charge: pc.Reference}
		out.Matched = &DepositMatched{Reference: r.Reference, Charge: pc.Reference}
		out.Applied.Intent = r.Reference
		return out, nil
	}
	out.Applied.Movement = &m
	out.Applied.Records = []ledger.Record{{
		ID: recordID, Reference: pc.Reference, Amount: pc.Amount, Currency: ledger.Currency, Status: ledger.Success,
		Type: ledger.Deposit, CreditType: ledger.Credit, CustomerID: holder.CustomerID, MerchantID: holder.MerchantID,
		Environment: env, Narration: "Bank transfer into your deposit account", CreatedAt: at, UpdatedAt: at,
	}}
	return out, nil
}

// FundFromCharge decides a verified charge of an escrow payment started
// here, given the funding the escrows decided (funding, from
// PayEscrows-style rules, or nil when they can no longer be funded:
// deleted, paid by someone else, the amount changed): funded, the
// intent's Settled carries the charge's credit and the funding in one
// movement, so the buyer's balance never shows the money in between;
// not funded, the charge credits the buyer's main balance as a deposit
// (recordID, the provider's reference) and the intent fails, nothing
// funded; an intent no longer staged (paid from the wallet meanwhile)
// keeps its outcome and the charge is credited as a deposit. A charge
// already applied does nothing (nil).
func FundFromCharge(c Charge, pc ProviderCharge, intent State, funding *Settled, recordID string, at time.Time) (*Credit, error) {
	if c.Applied {
		return nil, nil
	}
	if err := checkPaid(pc); err != nil {
		return nil, err
	}
	r := intent.Record
	if !c.Started() || !intent.Exists() || r.Type != ledger.EscrowPayment || r.CustomerID != c.CustomerID || r.Reference != c.Reference {
		return nil, domain.Errorf(domain.Internal, "payment: charge %s is not the payment's", pc.Reference)
	}
	credit := ChargeMovement(r.MerchantID, r.Environment, r.CustomerID, pc)
	out := &Credit{Applied: ChargeApplied{MerchantID: r.MerchantID, CustomerID: r.CustomerID, Amount: pc.Amount, Fee: pc.Fee}}
	if intent.Phase == Staged && funding != nil && pc.Amount == r.Amount && funding.Movement != nil {
		m := credit
		m.Postings = append(append([]ledger.Posting(nil), credit.Postings...), funding.Movement.Postings...)
		settled := *funding
		settled.Movement, settled.Charge = &m, pc.Reference
		out.Intent = &settled
		out.Applied.Intent = r.Reference
		return out, nil
	}
	if intent.Phase == Staged {
		// Nothing funded: the intent fails. (One settled meanwhile, paid
		// from the wallet, keeps its outcome.)
		failed := r
		failed.Status, failed.UpdatedAt = ledger.Failed, at
		out.Intent = &Settled{Records: []ledger.Record{failed}, Charge: pc.Reference}
	}
	out.Applied.Movement = &credit
	out.Applied.Records = []ledger.Record{{
		ID: recordID, Reference: pc.Reference, Amount: pc.Amount, Currency: ledger.Currency, Status: ledger.Success,
		Type: ledger.Deposit, CreditType: ledger.Credit, CustomerID: r.CustomerID, MerchantID: r.MerchantID,
		Environment: r.Environment, Narration: "Payment for " + r.Reference + " could not fund its escrow; credited to your wallet",
		CreatedAt: at, UpdatedAt: at,
	}}
	return out, nil
}

// Bounds of the provider's answers that events keep (every event fits
// domain.MaxEventBytes): an answer past them is refused, never clipped, as
// a clipped account number or payment page would send a payer astray.
const (
	MaxProviderReference = 100 // as a ledger record's reference
	MaxProviderCustomer  = 64
	MaxBankAccountField  = 200
)

// ErrProviderAnswerTooLong: the provider answered a field longer than an
// event keeps.
var ErrProviderAnswerTooLong = domain.Errorf(domain.Internal, "payment: the provider's answer exceeds what an event keeps")

// Check refuses an account with a field past MaxBankAccountField.
func (b BankAccount) Check() error {
	for _, f := range []string{b.BankName, b.AccountNumber, b.AccountName} {
		if utf8.RuneCountInString(f) > MaxBankAccountField {
			return ErrProviderAnswerTooLong
		}
	}
	return nil
}

// Check refuses a started charge whose reference or payment page is
// longer than an event keeps.
func (c ChargeStart) Check() error {
	if utf8.RuneCountInString(c.Reference) > MaxProviderReference || utf8.RuneCountInString(c.AuthorizationURL) > domain.MaxURL {
		return ErrProviderAnswerTooLong
	}
	return nil
}
