package app

import (
	"context"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/eventstore"
)

// ErrMerchantCannotSell refuses a non-business merchant selling as itself.
var ErrMerchantCannotSell = domain.Errorf(domain.Unauthenticated, "Merchant cannot create escrow for itself via API")

// readEscrow reads an escrow of the actor's merchant and environment.
func readEscrow(tx *Tx, a Actor, id string) (escrow.State, error) {
	e, err := Read(tx, EscrowKind, id)
	if err != nil {
		return e, err
	}
	return e, escrow.Owned(e, a.MerchantID, a.Environment)
}

// EscrowResult is an escrow after a command, with the append's position.
type EscrowResult struct {
	Escrow   escrow.State
	Position eventstore.Position
}

// CreateEscrow creates a payment link sold by sellerID ("" = the merchant
// itself, allowed for business merchants only).
func (s *Service) CreateEscrow(ctx context.Context, a Actor, sellerID string, d escrow.Draft) (EscrowResult, error) {
	return s.createEscrow(ctx, a, sellerID, d.CategoryID, func(tx *Tx, id, token string, fees escrow.FeeTerms) (escrow.Created, error) {
		if d.AutoRelease == nil { // the merchant's default, as it is now
			m, err := ReadLatest(tx, MerchantKind, a.MerchantID)
			if err != nil {
				return escrow.Created{}, err
			}
			d.AutoRelease = &m.EscrowDefaults.AutoRelease
		}
		return escrow.Create(id, token, a.MerchantID, a.Environment, sellerID, fees, d, s.Engine.Now())
	})
}

// createEscrow runs the checks every new escrow shares (the seller, the
// category, the merchant's fees as they are now) and records what decide
// makes of them.
func (s *Service) createEscrow(ctx context.Context, a Actor, sellerID, categoryID string,
	decide func(tx *Tx, id, token string, fees escrow.FeeTerms) (escrow.Created, error)) (EscrowResult, error) {
	id := s.newRecordID()
	var out EscrowResult
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		m, err := ReadLatest(tx, MerchantKind, a.MerchantID) // fees: an operator's change counts at once
		if err != nil {
			return err
		}
		if sellerID == "" && !m.Business {
			return ErrMerchantCannotSell
		}
		if sellerID != "" {
			if _, err := loadOwnCustomer(tx, a, sellerID, domain.Errorf(domain.NotFound, "Customer not found")); err != nil {
				return err
			}
		}
		if err := s.checkCategory(tx, a, categoryID); err != nil {
			return err
		}
		ev, err := decide(tx, id, s.IDs.PaymentToken(), escrow.FeeTerms{EscrowFeeBps: m.Fees.EscrowFeeBps, CommissionBps: m.Fees.CommissionBps})
		if err != nil {
			return err
		}
		Record(tx, EscrowKind, id, ev)
		out.Escrow = escrow.Apply(escrow.State{}, ev)
		return nil
	})
	out.Position = res.Position
	return out, err
}

// changeEscrow runs one decision on escrow id: read it (the actor's own),
// decide one event, record it with its money (recordEntry) and return the
// escrow as it now stands.
func (s *Service) changeEscrow(ctx context.Context, a Actor, id string, decide func(tx *Tx, e escrow.State) (domain.Event, error)) (EscrowResult, error) {
	var out EscrowResult
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		e, err := readEscrow(tx, a, id)
		if err != nil {
			return err
		}
		ev, err := decide(tx, e)
		if err != nil {
			return err
		}
		if err := refusedOnMovedWallet(tx, recordEntry(s, tx, EscrowKind, id, ev)); err != nil {
			return err
		}
		out.Escrow = escrow.Apply(e, ev)
		return nil
	})
	out.Position = res.Position
	return out, err
}

// EditEscrow applies the seller's edit of an unpaid link.
func (s *Service) EditEscrow(ctx context.Context, a Actor, seller, id string, p escrow.Patch) (EscrowResult, error) {
	return s.changeEscrow(ctx, a, id, func(tx *Tx, e escrow.State) (domain.Event, error) {
		if p.CategoryID != nil {
			if err := s.checkCategory(tx, a, *p.CategoryID); err != nil {
				return nil, err
			}
		}
		return escrow.Edit(e, seller, p, s.Engine.Now())
	})
}

// DeleteEscrow removes the seller's unpaid link.
func (s *Service) DeleteEscrow(ctx context.Context, a Actor, seller, id string) (eventstore.Position, error) {
	res, err := s.changeEscrow(ctx, a, id, func(_ *Tx, e escrow.State) (domain.Event, error) {
		return escrow.Delete(e, seller, s.Engine.Now())
	})
	return res.Position, err
}

// SetAdditionalFee sets the merchant's additional fee on an unpaid escrow.
func (s *Service) SetAdditionalFee(ctx context.Context, a Actor, id string, fee money.Amount, refundable *bool) (EscrowResult, error) {
	return s.changeEscrow(ctx, a, id, func(_ *Tx, e escrow.State) (domain.Event, error) {
		return escrow.SetAdditionalFee(e, fee, refundable, s.Engine.Now())
	})
}

// EscrowPayment is a buyer's payment for one or more escrows.
type EscrowPayment struct {
	Reference string
	Amount    money.Amount
	EscrowIDs []string
}

// PaymentResult is a settled escrow payment: the buyer's record and the
// funded escrows (clones included).
type PaymentResult struct {
	Record   ledger.Record
	Escrows  []escrow.State
	Position eventstore.Position
}

func checkEscrowIDs(ids []string) error {
	if len(ids) == 0 {
		return domain.Invalidf("escrowDetails.escrowId is required")
	}
	if len(ids) > payment.MaxEscrows {
		return domain.Invalidf("escrowDetails.escrowId must name at most %d escrows", payment.MaxEscrows)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if id == "" {
			return domain.Invalidf("escrowDetails.escrowId must not be empty")
		}
		if seen[id] {
			return domain.Invalidf("escrowDetails.escrowId must not repeat an escrow")
		}
		seen[id] = true
	}
	return nil
}

// stageEscrowIntent decides the intent of an escrow payment, checking every
// escrow may be bought and the amount is what they are due.
// An existing intent under the reference is only compared with the request
// (nil event when it is the same payment), never checked against the
// escrows again: they may since have been paid by it.
func (s *Service) stageEscrowIntent(tx *Tx, a Actor, buyerID string, in EscrowPayment, p payment.State, recordID string) (*payment.IntentCreated, error) {
	intent := payment.Intent{ID: recordID, Reference: in.Reference, Type: ledger.EscrowPayment, Amount: in.Amount,
		CustomerID: buyerID, MerchantID: a.MerchantID, Environment: a.Environment,
		Escrow: &ledger.EscrowDetails{EscrowIDs: in.EscrowIDs}, At: s.Engine.Now()}
	if p.Exists() {
		return payment.Stage(p, intent)
	}
	var due money.Amount
	for _, id := range in.EscrowIDs {
		e, err := readEscrow(tx, a, id)
		if err != nil {
			return nil, err
		}
		if err := escrow.CheckCheckout(e, buyerID); err != nil {
			return nil, err
		}
		due += e.Due()
		intent.Fee += e.BuyerFee()
	}
	if in.Amount != due {
		return nil, escrow.ErrAmountMismatch
	}
	return payment.Stage(p, intent)
}

// fundEscrows executes a staged escrow payment: each escrow (or a clone of
// a multi-unit link) is funded, the buyer's main balance is debited
// (checked) and the payment settles, all in the tx's one append.
func (s *Service) fundEscrows(tx *Tx, a Actor, stream string, p payment.State) (payment.State, []escrow.State, error) {
	settled, funded, err := s.decideFunding(tx, a, p)
	if err != nil {
		return p, nil, err
	}
	if err := recordEntry(s, tx, PaymentKind, stream, settled); err != nil {
		return p, nil, err
	}
	return payment.Apply(p, settled), funded, nil
}

// decideFunding funds each escrow of a staged escrow payment (recording
// the escrows' events in tx) and answers the payment's Settled, for the
// caller to record: from the buyer's main balance (fundEscrows), or with
// a provider's charge merged in (a card payment).
func (s *Service) decideFunding(tx *Tx, a Actor, p payment.State) (payment.Settled, []escrow.State, error) {
	buyerID := p.Record.CustomerID
	now := s.Engine.Now()
	var funded []escrow.State
	var ids, tokens []string
	var summaries []ledger.EscrowSummary
	var due, buyerFee money.Amount
	for _, id := range p.Record.EscrowDetails.EscrowIDs {
		e, err := readEscrow(tx, a, id)
		if err != nil {
			return payment.Settled{}, nil, err
		}
		buy, err := escrow.Buy(e, buyerID, p.Record.ID, s.newRecordID(), s.IDs.PaymentToken(), now)
		if err != nil {
			return payment.Settled{}, nil, err
		}
		Record(tx, EscrowKind, id, buy.Link...)
		if buy.Clone != nil {
			Record(tx, EscrowKind, buy.Clone.ID, buy.Events...)
		}
		funded = append(funded, buy.Funded)
		ids, tokens = append(ids, buy.Funded.ID), append(tokens, buy.Funded.PaymentToken)
		summary, err := s.escrowSummary(tx, a, buy.Funded)
		if err != nil {
			return payment.Settled{}, nil, err
		}
		summaries = append(summaries, summary)
		due += buy.Funded.Due()
		buyerFee += buy.Funded.BuyerFee()
	}
	if due != p.Record.Amount {
		// The terms changed since staging (an edit or a new additional fee).
		return payment.Settled{}, nil, escrow.ErrAmountMismatch
	}
	settled, err := payment.PayEscrows(p, escrow.FundingMovement(a.MerchantID, a.Environment, buyerID, funded), buyerFee, ids, tokens, summaries, now)
	return settled, funded, err
}

// PayEscrows pays one or more escrows from the buyer's main balance, all or
// none. A repeated request with the same reference returns the stored
// outcome and moves nothing.
func (s *Service) PayEscrows(ctx context.Context, a Actor, buyerID string, perms customer.Permissions, in EscrowPayment) (PaymentResult, error) {
	return s.payEscrows(ctx, a, buyerID, perms, in, nil)
}

// payEscrows is PayEscrows whose new payment also runs also in the same
// tx, so that what also records (a checkout session's payment) is in the
// payment's one atomic append, and its refusal refuses the payment.
func (s *Service) payEscrows(ctx context.Context, a Actor, buyerID string, perms customer.Permissions, in EscrowPayment,
	also func(tx *Tx, p payment.State) error) (PaymentResult, error) {
	var out PaymentResult
	if !perms.CanBuy {
		return out, ErrAccessDenied
	}
	if err := ledger.ValidReference(in.Reference); err != nil {
		return out, err
	}
	if err := checkEscrowIDs(in.EscrowIDs); err != nil {
		return out, err
	}
	stream := payment.StreamID(a.MerchantID, a.Environment, in.Reference)
	recordID := s.newRecordID()
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		// An attempt whose append conflicted leaves the escrows it built
		// (a clone never appended); each attempt answers only for itself.
		out = PaymentResult{}
		p, err := ReadNew(tx, PaymentKind, stream) // references are nearly always new
		if err != nil {
			return err
		}
		ev, err := s.stageEscrowIntent(tx, a, buyerID, in, p, recordID)
		if err != nil {
			return err
		}
		if ev != nil {
			Record(tx, PaymentKind, stream, *ev)
			p = payment.Apply(p, *ev)
		}
		if p.Phase == payment.Done { // the same payment again: its outcome
			out.Record = p.Record
			return ErrNothingToDo
		}
		p, out.Escrows, err = s.fundEscrows(tx, a, stream, p)
		out.Record = p.Record
		if err == nil && also != nil {
			err = also(tx, p)
		}
		return err
	})
	if err != nil {
		return out, err
	}
	out.Position = res.Position
	if out.Escrows == nil { // a repeat: read the escrows it funded
		for _, id := range out.Record.EscrowDetails.EscrowIDs {
			e, _, err := Load(ctx, s.Engine, EscrowKind, id)
			if err != nil {
				return out, err
			}
			out.Escrows = append(out.Escrows, e)
		}
	}
	return out, nil
}

// ConfirmEscrow is the buyer's confirmation: the seller is paid, the
// merchant earns its commission and the additional fee, exactly once.
func (s *Service) ConfirmEscrow(ctx context.Context, a Actor, buyerID, id string) (EscrowResult, error) {
	return s.changeEscrow(ctx, a, id, func(_ *Tx, e escrow.State) (domain.Event, error) {
		return escrow.Confirm(e, buyerID, s.Engine.Now())
	})
}

// ClaimEscrow is the seller's claim after the delivery window.
func (s *Service) ClaimEscrow(ctx context.Context, a Actor, seller, id string) (EscrowResult, error) {
	return s.changeEscrow(ctx, a, id, func(_ *Tx, e escrow.State) (domain.Event, error) {
		return escrow.Claim(e, seller, s.Engine.Now())
	})
}

// checkCategory validates an escrow's category ("" = none).
func (s *Service) checkCategory(tx *Tx, a Actor, id string) error {
	if id == "" {
		return nil
	}
	_, err := s.OwnCategory(tx, a, id)
	return err
}
