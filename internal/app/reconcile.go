// Reconciling payouts with the provider's list of transfers.

package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/internal/gateway"
)

// ReconcileAgent is the actor of what reconciliation records.
const ReconcileAgent = "reconcile"

// Kinds of difference reconciliation reports.
const (
	MissingHere    = "missing here"    // the provider has a payout no withdrawal here made
	MissingThere   = "missing there"   // a withdrawal here the provider has no payout for
	AmountDiffers  = "amount differs"  // the provider paid another amount than was debited
	StatusDiffers  = "status differs"  // the provider's outcome is not the withdrawal's
	ProviderSilent = "provider silent" // the provider did not answer about a payout it listed
)

// PayoutDifference is one difference between the provider's payouts and
// the withdrawals here.
type PayoutDifference struct {
	Kind              string `json:"kind"`
	ProviderReference string `json:"providerReference"`
	MerchantID        string `json:"merchantId,omitempty"`
	Reference         string `json:"reference,omitempty"` // the withdrawal's
	Here              string `json:"here,omitempty"`
	There             string `json:"there,omitempty"`
}

// PayoutReconciliation is what comparing a period found.
type PayoutReconciliation struct {
	Compared int `json:"compared"`
	// Healed are withdrawals still pending here whose outcome the
	// provider had: settled now, through the same path as its event.
	Healed      []PayoutDifference `json:"healed"`
	Differences []PayoutDifference `json:"differences"`
}

// ReconcilePayouts compares the provider's payouts of a period (transfers)
// with the bank withdrawals here of the same period (withdrawals, as the
// read model lists them). A withdrawal still pending whose payout the
// provider has settled is settled now (SettleProviderPayout: the provider
// is asked, and its answer goes through the one money rule); every other
// difference is reported, for an operator to look into.
func (s *Service) ReconcilePayouts(ctx context.Context, env domain.Environment, transfers []gateway.ProviderTransfer, withdrawals []ledger.Record) (PayoutReconciliation, error) {
	out := PayoutReconciliation{Healed: []PayoutDifference{}, Differences: []PayoutDifference{}}
	payouts := s.gateways(env).Payouts
	if payouts == nil {
		return out, ErrPaymentsNotConfigured
	}
	listed := map[string]bool{}
	for _, t := range transfers {
		listed[t.Reference] = true
		out.Compared++
		d := PayoutDifference{ProviderReference: t.Reference, There: string(t.Answer.Status)}
		link, _, err := Load(ctx, s.Engine, PayoutLinkKind, payment.PayoutLinkID(env, t.Reference))
		if err != nil {
			return out, err
		}
		if !link.Exists() {
			d.Kind = MissingHere
			out.Differences = append(out.Differences, d)
			continue
		}
		d.MerchantID, d.Reference = link.MerchantID, link.Reference
		st, _, err := Load(ctx, s.Engine, PaymentKind, payment.StreamID(link.MerchantID, env, link.Reference))
		if err != nil {
			return out, err
		}
		if st.Record.Amount != t.Amount {
			d.Kind, d.Here, d.There = AmountDiffers, st.Record.Amount.String(), t.Amount.String()
			out.Differences = append(out.Differences, d)
			continue
		}
		if outcomeOf(t.Answer.Status) == st.Record.Status {
			continue
		}
		d.Here = string(st.Record.Status)
		reversedAfterSuccess := st.Record.Status == ledger.Success && t.Answer.Status == payment.ProviderReversed
		if st.Phase == payment.PayingOut || reversedAfterSuccess {
			rec, err := s.SettleProviderPayout(ctx, env, t.Reference, ReconcileAgent)
			switch {
			case errors.Is(err, ErrPayoutUnanswered), errors.Is(err, payment.ErrPayoutInProgress):
				d.Kind = ProviderSilent
				out.Differences = append(out.Differences, d)
				continue
			case err != nil:
				return out, err
			}
			if rec.Status == outcomeOf(t.Answer.Status) {
				d.Kind = StatusDiffers
				out.Healed = append(out.Healed, d)
				continue
			}
			d.Here = string(rec.Status)
		}
		d.Kind = StatusDiffers
		out.Differences = append(out.Differences, d)
	}
	for _, w := range withdrawals {
		if w.Type != ledger.Withdrawal || w.WithdrawalDetails == nil {
			continue
		}
		ref := payouts.Reference(w)
		if listed[ref] {
			continue
		}
		out.Compared++
		d := PayoutDifference{Kind: MissingThere, ProviderReference: ref, MerchantID: w.MerchantID, Reference: w.Reference, Here: string(w.Status)}
		switch w.Status {
		case ledger.Success, ledger.Reversed:
			out.Differences = append(out.Differences, d)
		case ledger.Pending:
			// Only one the provider accepted should be on its list (one
			// staged, or debited and not yet sent, is not).
			st, _, err := Load(ctx, s.Engine, PaymentKind, payment.StreamID(w.MerchantID, env, w.Reference))
			if err != nil {
				return out, err
			}
			if st.AwaitingOutcome() {
				out.Differences = append(out.Differences, d)
			}
		}
		// A failed withdrawal may have been refused before any transfer
		// existed: nothing to find there.
	}
	return out, nil
}

// outcomeOf is the withdrawal status a provider's status settles to.
func outcomeOf(st payment.ProviderStatus) ledger.Status {
	switch st {
	case payment.ProviderSucceeded:
		return ledger.Success
	case payment.ProviderFailed:
		return ledger.Failed
	case payment.ProviderReversed:
		return ledger.Reversed
	}
	return ledger.Pending
}

// String describes a difference in a line.
func (d PayoutDifference) String() string {
	who := d.ProviderReference
	if d.Reference != "" {
		who = fmt.Sprintf("%s (%s of merchant %s)", d.ProviderReference, d.Reference, d.MerchantID)
	}
	return fmt.Sprintf("%s: %s: here %q, provider %q", d.Kind, who, d.Here, d.There)
}

// ReconcileCharges compares the provider's charges of a period (charges)
// with the records here its collections settled in the same period
// (collected, as the read model lists them: deposits and escrow payments
// that succeeded). A succeeded charge not yet in the ledger is put there
// now (SettleCharge: the provider is asked, and its answer goes through
// the one money rule; reported as healed); one no customer or payment
// here is paid by is missing here; a credit here the provider does not
// list is missing there; another amount, or a credit of a charge the
// provider says did not succeed, is a difference.
func (s *Service) ReconcileCharges(ctx context.Context, env domain.Environment, charges []payment.ProviderCharge, collected []ledger.Record) (PayoutReconciliation, error) {
	out := PayoutReconciliation{Healed: []PayoutDifference{}, Differences: []PayoutDifference{}}
	if s.gateways(env).Charges == nil {
		return out, ErrPaymentsNotConfigured
	}
	listed := map[string]bool{}
	for _, pc := range charges {
		listed[pc.Reference] = true
		out.Compared++
		d := PayoutDifference{ProviderReference: pc.Reference, There: string(pc.Status)}
		c, _, err := Load(ctx, s.Engine, ChargeKind, payment.ChargeID(env, pc.Reference))
		if err != nil {
			return out, err
		}
		d.MerchantID, d.Reference = c.MerchantID, c.Reference
		switch {
		case c.Applied && pc.Status != payment.ChargeSucceeded:
			d.Kind, d.Here = StatusDiffers, "credited"
			out.Differences = append(out.Differences, d)
		case c.Applied && c.Amount != pc.Amount:
			d.Kind, d.Here, d.There = AmountDiffers, c.Amount.String(), pc.Amount.String()
			out.Differences = append(out.Differences, d)
		case c.Applied, pc.Status != payment.ChargeSucceeded:
			// In agreement: credited on both sides, or on neither.
		default:
			res, err := s.SettleCharge(ctx, env, pc.Reference, ReconcileAgent)
			d.MerchantID, d.Reference, d.Here = res.MerchantID, res.Reference, "not credited"
			switch {
			case err != nil:
				d.Kind = ProviderSilent
				out.Differences = append(out.Differences, d)
			case res.Outcome == ChargeUnknownHere:
				d.Kind = MissingHere
				out.Differences = append(out.Differences, d)
			case res.Outcome == ChargeNotPaid || res.Outcome == ChargeUnknownThere:
				d.Kind, d.There = StatusDiffers, string(res.Charge.Status)
				out.Differences = append(out.Differences, d)
			case res.Outcome == ChargeAlreadyApplied:
				// Applied meanwhile (its event): nothing to heal.
			default:
				d.Kind, d.Here = MissingHere, res.Outcome
				out.Healed = append(out.Healed, d)
			}
		}
	}
	for _, r := range collected {
		ref, ok, err := s.providerChargeOf(ctx, env, r)
		if err != nil {
			return out, err
		}
		if !ok || listed[ref] {
			continue
		}
		out.Compared++
		out.Differences = append(out.Differences, PayoutDifference{Kind: MissingThere, ProviderReference: ref,
			MerchantID: r.MerchantID, Reference: r.Reference, Here: string(r.Status)})
	}
	return out, nil
}
