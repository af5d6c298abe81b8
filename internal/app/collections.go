// Collections through a payment provider: deposits into customers'
// dedicated accounts, and card, bank and USSD payments of escrows.

package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/checkout"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/gateway"
)

// Payment gateways of an escrow payment collected through a provider.
var chargeGateways = map[string][]string{"card": {"card"}, "bank": {"bank", "bank_transfer"}, "ussd": {"ussd"}}

// ValidChargeGateway reports whether g is a gateway an escrow can be paid
// through at a provider ("" is the wallet).
func ValidChargeGateway(g string) bool { _, ok := chargeGateways[g]; return ok }

// DepositAccount answers the customer's dedicated account, opening it at
// the provider on first need (recorded as events: the provider's customer,
// the account, and the link that lets a transfer into it find the
// customer). nil when the environment collects through no provider.
func (s *Service) DepositAccount(ctx context.Context, a Actor, c customer.State) (*payment.BankAccount, error) {
	charges := s.gateways(a.Environment).Charges
	if charges == nil {
		return nil, nil
	}
	st, err := Peek(ctx, s.Engine, DepositAccountKind, c.ID)
	if err != nil {
		return nil, err
	}
	if st.Account != nil {
		return st.Account, nil
	}
	code, acct, err := charges.OpenDepositAccount(ctx, gateway.DepositHolder{CustomerID: c.ID, Email: c.Email,
		FirstName: c.Firstname, LastName: c.Lastname, Phone: c.Phone})
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", ErrProviderUnavailable, err)
	}
	_, err = s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		d, err := Read(tx, DepositAccountKind, c.ID)
		if err != nil {
			return err
		}
		if d.Account != nil { // opened meanwhile (the provider answers the same)
			acct = *d.Account
			return ErrNothingToDo
		}
		index, err := s.blindIndex(tx.ctx, AccountPurpose, acct.AccountNumber)
		if err != nil {
			return err
		}
		linkID := payment.AccountLinkID(a.Environment, index)
		l, err := Read(tx, AccountLinkKind, linkID)
		if err != nil {
			return err
		}
		if l.Exists() && l.CustomerID != c.ID {
			return domain.Errorf(domain.Internal, "app: the provider answered customer %s's dedicated account for %s", l.CustomerID, c.ID)
		}
		if err := acct.Check(); err != nil || utf8.RuneCountInString(code) > payment.MaxProviderCustomer {
			return payment.ErrProviderAnswerTooLong
		}
		Record(tx, DepositAccountKind, c.ID, payment.DepositAccountOpened{MerchantID: a.MerchantID, CustomerID: c.ID,
			Environment: a.Environment, ProviderCustomer: code, Account: acct})
		if !l.Exists() {
			Record(tx, AccountLinkKind, linkID, payment.AccountLinked{MerchantID: a.MerchantID, CustomerID: c.ID})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &acct, nil
}

// KnownDepositAccount answers the customer's dedicated account if it has
// been opened (nil otherwise), without asking the provider.
func (s *Service) KnownDepositAccount(ctx context.Context, customerID string) (*payment.BankAccount, error) {
	st, err := Peek(ctx, s.Engine, DepositAccountKind, customerID)
	return st.Account, err
}

// ErrProviderUnavailable: the payment provider did not answer, or refused
// what it is asked on a customer's behalf; nothing was staged.
var ErrProviderUnavailable = &domain.Error{Code: domain.Unavailable, Resumable: true,
	Message: "The payment provider is not available; try again later"}

// Outcomes of a charge (ChargeResult.Outcome).
const (
	ChargeCredited        = "credited"         // a deposit credited the customer
	ChargeSettledIntent   = "settled intent"   // it settled the deposit intent Reference
	ChargeFunded          = "funded"           // it funded the escrow payment Reference
	ChargeCreditedInstead = "credited instead" // its escrows could not be funded: the buyer is credited
	ChargeAlreadyApplied  = "already applied"  // applied before: nothing moved
	ChargeNotPaid         = "not paid"         // the provider does not say it succeeded
	ChargeUnknownThere    = "unknown there"    // the provider has no such charge
	ChargeUnknownHere     = "unknown here"     // no customer or payment here is paid by it
)

// ChargeResult says what asking about a charge did.
type ChargeResult struct {
	Outcome    string
	MerchantID string
	CustomerID string
	// Reference is the record's: the intent's, or the provider's for a
	// deposit of its own.
	Reference string
	Charge    payment.ProviderCharge
	// Position is the append's that applied it (zero when none did).
	Position eventstore.Position
}

func (r ChargeResult) String() string {
	if r.MerchantID == "" {
		return fmt.Sprintf("charge %q: %s", r.Charge.Reference, r.Outcome)
	}
	return fmt.Sprintf("charge %q: %s (%s of customer %s, merchant %s)", r.Charge.Reference, r.Outcome, r.Reference, r.CustomerID, r.MerchantID)
}

// SettleCharge puts the charge the provider names providerRef in the
// ledger, once, on the provider's answer asked now (never on an event's
// body): a transfer into a dedicated account credits its holder (or
// settles the deposit intent it matches), a payment started here funds its
// escrows (or credits the buyer when they can no longer be funded). Any
// number of callers, on any number of instances, move the money once: the
// charge's stream is written in the same append as the money. An error
// means the provider did not answer: ask again later.
func (s *Service) SettleCharge(ctx context.Context, env domain.Environment, providerRef, agent string) (ChargeResult, error) {
	out := ChargeResult{Charge: payment.ProviderCharge{Reference: providerRef}}
	charges := s.gateways(env).Charges
	if charges == nil {
		return out, ErrPaymentsNotConfigured
	}
	pc, err := charges.Charge(ctx, providerRef)
	if errors.Is(err, gateway.ErrChargeUnknown) {
		out.Outcome = ChargeUnknownThere
		return out, nil
	}
	if err != nil {
		return out, err
	}
	out.Charge = pc
	if pc.Status != payment.ChargeSucceeded {
		out.Outcome = ChargeNotPaid
		return out, nil
	}
	chargeID := payment.ChargeID(env, providerRef)
	c, _, err := Load(ctx, s.Engine, ChargeKind, chargeID)
	if err != nil {
		return out, err
	}
	switch {
	case c.Started():
		return s.fundFromCharge(ctx, env, c, pc, agent, out)
	case c.Applied:
		out.Outcome, out.MerchantID, out.CustomerID, out.Reference = ChargeAlreadyApplied, c.MerchantID, c.CustomerID, providerRef
		return out, nil
	case pc.Account != "":
		return s.creditDeposit(ctx, env, pc, agent, out)
	}
	out.Outcome = ChargeUnknownHere
	return out, nil
}

// creditDeposit credits a verified transfer into a dedicated account.
func (s *Service) creditDeposit(ctx context.Context, env domain.Environment, pc payment.ProviderCharge, agent string, out ChargeResult) (ChargeResult, error) {
	index, err := s.blindIndex(ctx, AccountPurpose, pc.Account)
	if err != nil {
		return out, err
	}
	holder, _, err := Load(ctx, s.Engine, AccountLinkKind, payment.AccountLinkID(env, index))
	if err != nil {
		return out, err
	}
	if !holder.Exists() {
		out.Outcome = ChargeUnknownHere
		return out, nil
	}
	out.MerchantID, out.CustomerID = holder.MerchantID, holder.CustomerID
	a := Actor{MerchantID: holder.MerchantID, Environment: env, Agent: agent}
	chargeID := payment.ChargeID(env, pc.Reference)
	recordID := s.newRecordID()
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		c, err := Read(tx, ChargeKind, chargeID)
		if err != nil {
			return err
		}
		if c.Applied {
			out.Outcome, out.Reference = ChargeAlreadyApplied, pc.Reference
			return ErrNothingToDo
		}
		acct, err := Read(tx, DepositAccountKind, holder.CustomerID)
		if err != nil {
			return err
		}
		now := s.Engine.Now()
		var intent *payment.State
		var stream string
		if awaited, ok := acct.Match(pc.Amount, now); ok {
			stream = payment.StreamID(holder.MerchantID, env, awaited.Reference)
			p, err := Read(tx, PaymentKind, stream)
			if err != nil {
				return err
			}
			intent = &p
		}
		credit, err := payment.CreditDeposit(c, pc, holder, env, intent, recordID, now)
		if err != nil {
			return err
		}
		if err := recordEntry(s, tx, ChargeKind, chargeID, credit.Applied); err != nil {
			return err
		}
		out.Outcome, out.Reference = ChargeCredited, pc.Reference
		if credit.Matched != nil {
			Record(tx, DepositAccountKind, holder.CustomerID, *credit.Matched)
		}
		if credit.Intent != nil {
			if err := recordEntry(s, tx, PaymentKind, stream, *credit.Intent); err != nil {
				return err
			}
			out.Outcome, out.Reference = ChargeSettledIntent, credit.Matched.Reference
		}
		return nil
	})
	out.Position = res.Position
	return out, err
}

// fundFromCharge applies a verified charge of an escrow payment started
// here: its escrows funded in one append with the charge's credit, or,
// when they can no longer be funded, the buyer credited instead.
func (s *Service) fundFromCharge(ctx context.Context, env domain.Environment, c payment.Charge, pc payment.ProviderCharge, agent string, out ChargeResult) (ChargeResult, error) {
	a := Actor{MerchantID: c.MerchantID, Environment: env, Agent: agent}
	out.MerchantID, out.CustomerID, out.Reference = c.MerchantID, c.CustomerID, c.Reference
	chargeID := payment.ChargeID(env, pc.Reference)
	stream := payment.StreamID(c.MerchantID, env, c.Reference)
	recordID := s.newRecordID()
	attempt := func(fund bool) error {
		res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
			ch, err := Read(tx, ChargeKind, chargeID)
			if err != nil {
				return err
			}
			if ch.Applied {
				out.Outcome = ChargeAlreadyApplied
				return ErrNothingToDo
			}
			p, err := Read(tx, PaymentKind, stream)
			if err != nil {
				return err
			}
			var funding *payment.Settled
			if fund && p.Phase == payment.Staged && pc.Amount == p.Record.Amount {
				settled, _, err := s.decideFunding(tx, a, p)
				if err != nil {
					return fundingRefused{err}
				}
				if id, ok := checkoutOfCharge(p.Record.Reference); ok {
					// A checkout session's payment: the session is paid in
					// the same append, and one no longer open refuses it.
					cur, err := Read(tx, CheckoutKind, id)
					if err != nil {
						return err
					}
					if cur.EscrowID != p.Record.EscrowDetails.EscrowIDs[0] || cur.CustomerID != p.Record.CustomerID {
						return domain.Errorf(domain.Internal, "app: payment %s is not checkout %s's", p.Record.Reference, id)
					}
					paid, err := checkout.PayByCharge(cur, p.Record.Reference, p.Record.ID, s.Engine.Now())
					if err != nil {
						return fundingRefused{err}
					}
					Record(tx, CheckoutKind, id, paid)
				}
				funding = &settled
			}
			credit, err := payment.FundFromCharge(ch, pc, p, funding, recordID, s.Engine.Now())
			if err != nil {
				return err
			}
			if err := recordEntry(s, tx, ChargeKind, chargeID, credit.Applied); err != nil {
				return err
			}
			if credit.Intent != nil {
				if err := recordEntry(s, tx, PaymentKind, stream, *credit.Intent); err != nil {
					return err
				}
			}
			out.Outcome = ChargeCreditedInstead
			if credit.Applied.Movement == nil {
				out.Outcome = ChargeFunded
			}
			return nil
		})
		out.Position = res.Position
		return err
	}
	err := attempt(true)
	var refused fundingRefused
	if errors.As(err, &refused) {
		// The escrows can no longer be funded (deleted, bought by someone
		// else, their terms changed): a decision on state read afresh, so
		// the money is the buyer's. Nothing the refused attempt decided was
		// appended.
		var derr *domain.Error
		if !errors.As(refused.err, &derr) || derr.Code == domain.Internal {
			return out, refused.err
		}
		err = attempt(false)
	}
	return out, err
}

// fundingRefused carries the refusal of an escrow payment's funding.
type fundingRefused struct{ err error }

func (f fundingRefused) Error() string { return "funding refused: " + f.err.Error() }
func (f fundingRefused) Unwrap() error { return f.err }

// startCharge starts the payment of a staged escrow payment at the
// provider (record recordID, for amount by the buyer) and answers where
// the payer completes it.
func (s *Service) startCharge(ctx context.Context, env domain.Environment, charges gateway.Charges, buyer customer.State,
	recordID string, in IntentRequest) (*payment.ChargeStart, error) {
	ref := charges.Reference(recordID)
	url, err := charges.Initialize(ctx, gateway.ChargeRequest{Reference: ref, Email: buyer.Email, Amount: in.Amount,
		CallbackURL: in.CallbackURL, Channels: chargeGateways[in.Gateway]})
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", ErrProviderUnavailable, err)
	}
	return &payment.ChargeStart{Reference: ref, AuthorizationURL: url}, nil
}

// settleIntentCharge asks the provider about the charge of an intent
// collected through it and answers the intent as it then stands.
func (s *Service) settleIntentCharge(ctx context.Context, a Actor, st payment.State) (payment.State, eventstore.Position, error) {
	var pos eventstore.Position
	if st.Phase == payment.Staged && st.ChargeReference != "" {
		res, err := s.SettleCharge(ctx, a.Environment, st.ChargeReference, "")
		if err != nil {
			return st, pos, err
		}
		pos = res.Position
	}
	stream := payment.StreamID(a.MerchantID, a.Environment, st.Record.Reference)
	if st.Phase == payment.Staged && st.DepositAccount != nil {
		// A deposit no transfer matched within its lifetime fails.
		res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
			p, err := Read(tx, PaymentKind, stream)
			if err != nil {
				return err
			}
			acct, err := Read(tx, DepositAccountKind, p.Record.CustomerID)
			if err != nil {
				return err
			}
			failed, lapsed := payment.LapseDeposit(p, acct, s.Engine.Now())
			if failed == nil {
				return ErrNothingToDo
			}
			if err := recordEntry(s, tx, PaymentKind, stream, *failed); err != nil {
				return err
			}
			if lapsed != nil {
				Record(tx, DepositAccountKind, p.Record.CustomerID, *lapsed)
			}
			return nil
		})
		if err != nil {
			return st, pos, err
		}
		if res.Position != (eventstore.Position{}) {
			pos = res.Position
		}
	}
	p, _, err := Load(ctx, s.Engine, PaymentKind, stream)
	return p, pos, err
}

// providerChargeOf reports whether a ledger record is money a provider
// collected, and the provider's reference of it.
func (s *Service) providerChargeOf(ctx context.Context, env domain.Environment, r ledger.Record) (string, bool, error) {
	if r.Status != ledger.Success {
		return "", false, nil
	}
	switch r.Type {
	case ledger.Deposit, ledger.EscrowPayment:
	default:
		return "", false, nil
	}
	p, _, err := Load(ctx, s.Engine, PaymentKind, payment.StreamID(r.MerchantID, env, r.Reference))
	if err != nil {
		return "", false, err
	}
	if p.Exists() && p.Record.ID == r.ID {
		return p.ChargeReference, p.ChargeReference != "", nil
	}
	c, _, err := Load(ctx, s.Engine, ChargeKind, payment.ChargeID(env, r.Reference))
	if err != nil {
		return "", false, err
	}
	return r.Reference, c.Applied && c.CustomerID == r.CustomerID, nil
}

// checkoutOfCharge is the checkout session whose payment at a provider
// reference is (checkout.ChargeReference), if it is one.
func checkoutOfCharge(reference string) (string, bool) {
	rest, ok := strings.CutPrefix(reference, checkout.Reference(""))
	i := strings.LastIndexByte(rest, '_')
	if !ok || i <= 0 || !ValidChargeGateway(rest[i+1:]) {
		return "", false
	}
	return rest[:i], true
}

// CheckoutCharge starts (or finds again) the payment of session id's
// escrow at the provider by gateway (card, bank, ussd), for amount, the
// total the page showed; the result carries the page the buyer pays on,
// who comes back to callbackURL. The charge's verified success funds the
// escrow and pays the session in one append (SettleCharge).
func (s *Service) CheckoutCharge(ctx context.Context, id, gw string, amount money.Amount, callbackURL string) (IntentResult, error) {
	st, err := s.Checkout(ctx, id)
	if err != nil {
		return IntentResult{}, err
	}
	if err := checkout.CheckOpen(st, s.Engine.Now()); err != nil {
		return IntentResult{}, err
	}
	if !ValidChargeGateway(gw) {
		return IntentResult{}, domain.Invalidf("gateway must be one of card, bank, ussd")
	}
	a, perms, err := s.buyerOf(ctx, st)
	if err != nil {
		return IntentResult{}, err
	}
	return s.CreateIntent(ctx, a, st.CustomerID, perms, IntentRequest{Type: ledger.EscrowPayment, Amount: amount,
		Reference: checkout.ChargeReference(id, gw), EscrowIDs: []string{st.EscrowID}, Gateway: gw, CallbackURL: callbackURL})
}

// CollectsThroughProvider reports whether env collects payments through a
// provider (dedicated accounts, card, bank and USSD).
func (s *Service) CollectsThroughProvider(env domain.Environment) bool {
	return s.gateways(env).Charges != nil
}

// ChargeReturn is what a payer coming back from the provider's page finds.
type ChargeReturn struct {
	Result  ChargeResult
	Payment payment.State
	// Session is the checkout session the payment was made from (nil
	// when none).
	Session *checkout.State
}

// ErrUnknownCharge: no payment here was started under the reference.
var ErrUnknownCharge = domain.Errorf(domain.NotFound, "Payment not found")

// ReturnFromCharge is the payer back from the provider's page with
// providerRef: the charge is asked about at once (as its event would),
// so the page can say what happened; the provider not answering leaves
// the payment pending, for its event or a later visit.
func (s *Service) ReturnFromCharge(ctx context.Context, providerRef string) (ChargeReturn, error) {
	var out ChargeReturn
	for _, env := range []domain.Environment{domain.Live, domain.Test} {
		c, _, err := Load(ctx, s.Engine, ChargeKind, payment.ChargeID(env, providerRef))
		if err != nil {
			return out, err
		}
		if !c.Started() {
			continue
		}
		if s.gateways(env).Charges != nil {
			res, err := s.SettleCharge(ctx, env, providerRef, "")
			if err == nil {
				out.Result = res
			}
		}
		if out.Payment, _, err = Load(ctx, s.Engine, PaymentKind, payment.StreamID(c.MerchantID, env, c.Reference)); err != nil {
			return out, err
		}
		if id, ok := checkoutOfCharge(c.Reference); ok {
			st, _, err := Load(ctx, s.Engine, CheckoutKind, id)
			if err != nil {
				return out, err
			}
			out.Session = &st
		}
		return out, nil
	}
	return out, ErrUnknownCharge
}
