package escrow

import (
	"fmt"
	"time"

	"github.com/escrowd/escrowd/domain/ids"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
)

// SettlementType is how an escrow's money is released: all at once
// (STANDARD), milestone by milestone (MILESTONE), or to one of several
// participants who staked it (VAULT).
type SettlementType string

const (
	StandardSettlement  SettlementType = "STANDARD"
	MilestoneSettlement SettlementType = "MILESTONE"
	VaultSettlement     SettlementType = "VAULT"
)

// Hold is money an escrow keeps in a customer's escrow balance: the buyer's
// payment, or a vault participant's stake.
type Hold struct {
	CustomerID string
	Amount     money.Amount
}

// Payout is one credit of a settlement to a party's main balance, and the
// transaction record that tells that party why its balance moved.
type Payout struct {
	CustomerID string       // "" = the merchant (it sells as itself)
	Amount     money.Amount //
	Fee        money.Amount // the fee this party bore, shown on its record
	Type       ledger.Type  // escrow_release, escrow_refund, vault_payout, vault_refund
	Key        string       // names the record within the escrow ("release", "refund", "release-<milestone>")
}

// Settlement says where held money goes when all or part of an escrow
// settles. Every way an escrow pays out (confirm, claim, a dispute's
// resolution, a milestone's release, a vault's winner or cancellation)
// builds one, and Entry turns it into balanced postings and records, so
// the fee rules live in the builders and the bookkeeping in one place.
type Settlement struct {
	// Status is the status the escrow reaches; "" leaves it unchanged (a
	// milestone released before the last).
	Status Status
	// Holds is what leaves customers' escrow balances; it pays the
	// payouts and the fee, to the kobo.
	Holds   []Hold
	Payouts []Payout
	// Fee is the escrow fee collected by this settlement: 0 when another
	// settlement of the same escrow collects it (commission is charged
	// once per escrow). Commission is the merchant's share of it; the
	// platform keeps the rest.
	Fee        money.Amount
	Commission money.Amount
	// AdditionalFee moves from the merchant's escrow balance to the
	// merchant's main balance (a delivery), or back to the buyer when
	// AdditionalFeeToBuyer.
	AdditionalFee        money.Amount
	AdditionalFeeToBuyer bool
}

// Held is the total the settlement releases from escrow balances.
func (st Settlement) Held() money.Amount {
	var sum money.Amount
	for _, h := range st.Holds {
		sum += h.Amount
	}
	return sum
}

// PaidOut is the total of the payouts.
func (st Settlement) PaidOut() money.Amount {
	var sum money.Amount
	for _, p := range st.Payouts {
		sum += p.Amount
	}
	return sum
}

// ErrUnsettled is a settlement whose parts do not add up: a programming
// error, never a client one.
var ErrUnsettled = fmt.Errorf("%w: settlement does not add up", ledger.ErrUnbalanced)

// check verifies the settlement conserves money: what leaves escrow
// balances is exactly what the payouts and the fee receive, no part is
// negative and the commission is a part of the fee.
func (st Settlement) check() error {
	for _, h := range st.Holds {
		if h.Amount < 0 || h.CustomerID == "" {
			return fmt.Errorf("%w: hold %+v", ErrUnsettled, h)
		}
	}
	for _, p := range st.Payouts {
		if p.Amount < 0 || p.Fee < 0 || p.Key == "" {
			return fmt.Errorf("%w: payout %+v", ErrUnsettled, p)
		}
	}
	if st.Fee < 0 || st.Commission < 0 || st.Commission > st.Fee || st.AdditionalFee < 0 {
		return fmt.Errorf("%w: fee %s, commission %s, additional fee %s", ErrUnsettled, st.Fee, st.Commission, st.AdditionalFee)
	}
	if st.Held() != st.PaidOut()+st.Fee {
		return fmt.Errorf("%w: holds %s, payouts %s, fee %s", ErrUnsettled, st.Held(), st.PaidOut(), st.Fee)
	}
	return nil
}

// Entry turns the settlement of escrow e into the movement and records of
// its event. Holds pay the credits they can pay to the same customer
// first (a refund returns the buyer's own money), then the rest in order:
// payouts, commission, the platform's share.
func (st Settlement) Entry(e State, at time.Time) (ledger.Movement, []ledger.Record, error) {
	if err := st.check(); err != nil {
		return ledger.Movement{}, nil, err
	}
	type sink struct {
		to         ledger.Account
		customerID string
		amount     money.Amount
	}
	var sinks []sink
	for _, p := range st.Payouts {
		sinks = append(sinks, sink{e.mainOf(p.CustomerID), p.CustomerID, p.Amount})
	}
	sinks = append(sinks, sink{to: ledger.MerchantMain(e.MerchantID), amount: st.Commission},
		sink{to: ledger.PlatformRevenue(e.MerchantID), amount: st.Fee - st.Commission})
	left := make([]money.Amount, len(st.Holds))
	for i, h := range st.Holds {
		left[i] = h.Amount
	}
	m := ledger.Movement{MerchantID: e.MerchantID, Environment: e.Environment}
	pay := func(i int, k *sink) {
		n := min(left[i], k.amount)
		m.Move(ledger.CustomerEscrow(st.Holds[i].CustomerID), k.to, n)
		left[i] -= n
		k.amount -= n
	}
	for k := range sinks {
		for i, h := range st.Holds {
			if sinks[k].customerID != "" && h.CustomerID == sinks[k].customerID {
				pay(i, &sinks[k])
			}
		}
	}
	for k := range sinks {
		for i := range st.Holds {
			pay(i, &sinks[k])
		}
	}
	additionalTo := ledger.MerchantMain(e.MerchantID)
	if st.AdditionalFeeToBuyer {
		additionalTo = ledger.CustomerMain(e.BuyerID)
	}
	m.Move(ledger.MerchantEscrow(e.MerchantID), additionalTo, st.AdditionalFee)

	var records []ledger.Record
	for _, p := range st.Payouts {
		if p.Amount > 0 {
			records = append(records, e.record(p.Key, p.Type, p.CustomerID, p.Amount, p.Fee, at))
		}
	}
	if st.Commission > 0 {
		records = append(records, e.record("commission", ledger.Commission, "", st.Commission, 0, at))
	}
	switch {
	case st.AdditionalFee > 0 && st.AdditionalFeeToBuyer:
		records = append(records, e.record("additional-fee-refund", ledger.EscrowRefund, e.BuyerID, st.AdditionalFee, 0, at))
	case st.AdditionalFee > 0:
		records = append(records, e.record("delivery", ledger.Delivery, "", st.AdditionalFee, 0, at))
	}
	return m, records, nil
}

// mainOf is the main balance of a customer, or the merchant's for "".
func (s State) mainOf(customerID string) ledger.Account {
	if customerID == "" {
		return ledger.MerchantMain(s.MerchantID)
	}
	return ledger.CustomerMain(customerID)
}

// record is a settled credit record of the escrow, named by key: its id
// is derived from the escrow's id and the key (a record id like any
// other), its reference spells them out.
func (s State) record(key string, typ ledger.Type, customerID string, amount, fee money.Amount, at time.Time) ledger.Record {
	return ledger.Record{ID: ids.Derived(at, s.ID+"/"+key), Reference: "ESC-" + s.ID + "-" + key, Amount: amount, Fee: fee,
		Currency: ledger.Currency, Status: ledger.Success, Type: typ, CreditType: ledger.Credit, CustomerID: customerID,
		MerchantID: s.MerchantID, Environment: s.Environment,
		EscrowDetails: &ledger.EscrowDetails{EscrowIDs: []string{s.ID}, PaymentTokens: []string{s.PaymentToken}},
		CreatedAt:     at, UpdatedAt: at}
}

// feeLegs is the escrow fee and the merchant's commission of it.
func (s State) feeLegs() (fee, commission money.Amount) {
	return s.Fee, Commission(s.Fee, s.FeeTerms.CommissionBps)
}

// HeldPool is what the escrow still holds for the seller: the amount less
// the seller's share of the fee and what partial refunds returned for a
// standard escrow, the milestones not yet released for a milestone escrow.
// A split divides exactly this.
func (s State) HeldPool() money.Amount {
	if s.Type() == MilestoneSettlement {
		var sum money.Amount
		for _, m := range s.Milestones {
			if m.Status == MilestonePending {
				sum += m.Amount
			}
		}
		return sum
	}
	return s.Terms.Amount - FeeShares(s.Fee, s.Terms.WhoPays).Seller - s.PartiallyRefunded
}

// remaining is the settlement of everything the escrow still holds: the
// buyer's escrow balance releases the held pool and the whole fee (the
// fee is collected when the escrow closes, whatever way it closes), and
// the additional fee leaves the merchant's escrow balance. The caller
// says who receives the pool.
func (s State) remaining(status Status, payouts []Payout, additionalToBuyer bool) Settlement {
	fee, commission := s.feeLegs()
	return Settlement{Status: status, Holds: []Hold{{CustomerID: s.BuyerID, Amount: s.HeldPool() + fee}}, Payouts: payouts,
		Fee: fee, Commission: commission, AdditionalFee: s.AdditionalFee, AdditionalFeeToBuyer: additionalToBuyer}
}

// releasePayouts pays the held pool to the seller: for a milestone escrow,
// each pending milestone to its beneficiary (or the seller).
func (s State) releasePayouts() []Payout {
	if s.Type() == MilestoneSettlement {
		var out []Payout
		for _, m := range s.Milestones {
			if m.Status == MilestonePending {
				out = append(out, s.milestonePayout(m))
			}
		}
		return out
	}
	seller := FeeShares(s.Fee, s.Terms.WhoPays).Seller
	return []Payout{{CustomerID: s.SellerID, Amount: s.HeldPool(), Fee: seller, Type: ledger.EscrowRelease, Key: "release"}}
}

// milestonePayout releases milestone m to its beneficiary, or the seller.
func (s State) milestonePayout(m Milestone) Payout {
	to := m.CustomerID
	if to == "" {
		to = s.SellerID
	}
	return Payout{CustomerID: to, Amount: m.Amount, Type: ledger.EscrowRelease, Key: "release-" + m.ID}
}

// Completion settles everything held to the seller (COMPLETED, CLAIMED).
func (s State) Completion(status Status) Settlement {
	return s.remaining(status, s.releasePayouts(), false)
}

// Refund returns the held pool to the buyer (REFUNDED); the fee is kept,
// and the additional fee goes back to the buyer when refundable.
func (s State) Refund(additionalFeeRefundable bool) Settlement {
	return s.remaining(Refunded, []Payout{{CustomerID: s.BuyerID, Amount: s.HeldPool(), Type: ledger.EscrowRefund, Key: "refund"}},
		additionalFeeRefundable)
}

// SplitBetween divides the held pool (SPLIT): sellerAmount to the seller,
// buyerAmount back to the buyer; the caller has checked they add up.
func (s State) SplitBetween(sellerAmount, buyerAmount money.Amount, additionalFeeRefundable bool) Settlement {
	return s.remaining(Split, []Payout{
		{CustomerID: s.SellerID, Amount: sellerAmount, Type: ledger.EscrowRelease, Key: "release"},
		{CustomerID: s.BuyerID, Amount: buyerAmount, Type: ledger.EscrowRefund, Key: "refund"},
	}, additionalFeeRefundable)
}
