package escrow

import (
	"reflect"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
)

// refundOf is the partial refund event of amount, the escrow's n-th.
func refundOf(n string, amount money.Amount) PartiallyRefunded {
	return PartiallyRefunded{Amount: amount, RefundedBy: "m1", At: now,
		Movement: movement(post(buyerEscrow, buyerMain, amount)),
		Records:  []ledger.Record{record("partial-refund-"+n, ledger.Refund, "b1", amount, 0)}}
}

func TestPartialRefund(t *testing.T) {
	disputed := append(funds(0), opened("b1"))
	tests := []struct {
		name     string
		given    []domain.Event
		merchant string
		amount   money.Amount
		want     *PartiallyRefunded
		wantErr  error
		wantMsg  string
	}{
		{name: "ongoing", given: funds(0), merchant: "m1", amount: money.Naira(4000), want: ptr(refundOf("1", money.Naira(4000)))},
		{name: "disputed", given: disputed, merchant: "m1", amount: money.Naira(1), want: ptr(refundOf("1", money.Naira(1)))},
		{name: "a second refund is numbered", given: append(funds(0), refundOf("1", money.Naira(4000))), merchant: "m1",
			amount: money.Naira(5999), want: ptr(refundOf("2", money.Naira(5999)))},
		{name: "in kobo", given: funds(0), merchant: "m1", amount: 1, want: ptr(refundOf("1", 1))},
		// The seller's share of the fee is not held for the seller.
		{name: "seller pays: the pool is the amount less the fee", given: funds(0, whoPays(Seller)), merchant: "m1",
			amount: money.Naira(9750), wantMsg: "amount must be less than the held amount of 9750"},
		{name: "everything held", given: funds(0), merchant: "m1", amount: money.Naira(10000),
			wantMsg: "amount must be less than the held amount of 10000"},
		{name: "what is left after a refund", given: append(funds(0), refundOf("1", money.Naira(4000))), merchant: "m1",
			amount: money.Naira(6000), wantMsg: "amount must be less than the held amount of 6000"},
		{name: "zero", given: funds(0), merchant: "m1", amount: 0, wantErr: ErrRefundAmount},
		{name: "negative", given: funds(0), merchant: "m1", amount: -100, wantErr: ErrRefundAmount},
		{name: "unpaid", given: []domain.Event{link()}, merchant: "m1", amount: 100, wantErr: ErrActionNotAllowed},
		{name: "never created", merchant: "m1", amount: 100, wantErr: ErrActionNotAllowed},
		{name: "another merchant", given: funds(0), merchant: "m2", amount: 100, wantErr: ErrActionNotAllowed},
		{name: "investigating", given: append(disputed, answered("s1")), merchant: "m1", amount: 100, wantErr: ErrActionNotAllowed},
		{name: "completed", given: append(funds(0), Released{Status: Completed, At: now}), merchant: "m1", amount: 100,
			wantErr: ErrActionNotAllowed},
		{name: "deleted", given: []domain.Event{link(), Deleted{At: now}}, merchant: "m1", amount: 100, wantErr: ErrActionNotAllowed},
		{name: "a milestone escrow", merchant: "m1", amount: 100, wantErr: ErrRefundStandardOnly,
			given: []domain.Event{link(func(c *Created) {
				c.SettlementType = MilestoneSettlement
				c.Milestones = []Milestone{{ID: "m1", Amount: money.Naira(4000), Status: MilestonePending},
					{ID: "m2", Amount: money.Naira(6000), Status: MilestonePending}}
			}), funded("b1")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fold(tt.given...)
			got, err := PartialRefund(s, tt.merchant, tt.amount, now)
			if refused(t, err, tt.wantErr, tt.wantMsg) {
				return
			}
			if !reflect.DeepEqual(got, *tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, *tt.want)
			}
			checkBalanced(t, got.Movement)
			after := Apply(s, got)
			if after.Status != s.Status || after.HeldPool() != s.HeldPool()-tt.amount {
				t.Fatalf("after the refund: status %s, pool %s (was %s, %s)", after.Status, after.HeldPool(), s.Status, s.HeldPool())
			}
		})
	}
}

// Whatever settles a partially refunded escrow divides only what is still
// held, and collects the whole fee: buyer escrow ends at zero, and the
// seller, buyer and fee receive, over both events, exactly what the buyer
// paid.
func TestPartialRefundThenSettle(t *testing.T) {
	autoReleasing := paid(t, autoRelease) // released seven days after paidAt, before now
	refunded := money.Naira(4000)
	for _, tc := range []struct {
		name          string
		given         []domain.Event
		settle        func(State) (domain.Event, error)
		seller, buyer money.Amount // what each main balance receives over both events
	}{
		{name: "confirm", given: funds(0), seller: money.Naira(6000), buyer: refunded,
			settle: func(s State) (domain.Event, error) { return Confirm(s, "b1", now) }},
		{name: "auto-release", given: autoReleasing, seller: money.Naira(6000), buyer: refunded,
			settle: func(s State) (domain.Event, error) { return AutoRelease(s, now) }},
		{name: "seller pays, claim", given: funds(0, whoPays(Seller)), seller: money.Naira(5750), buyer: refunded,
			settle: func(s State) (domain.Event, error) { return Claim(s, "s1", now) }},
		{name: "resolved REFUNDED", given: append(funds(0), opened("b1")), seller: 0, buyer: money.Naira(10000),
			settle: func(s State) (domain.Event, error) {
				return Resolve(s, Resolution{Status: string(Refunded), MerchantID: "m1"}, now)
			}},
		{name: "resolved SPLIT of the rest", given: append(funds(0), opened("b1")), seller: money.Naira(3500),
			buyer: refunded + money.Naira(2500),
			settle: func(s State) (domain.Event, error) {
				return Resolve(s, Resolution{Status: string(Split), MerchantID: "m1",
					SellerAmount: ptr(money.Naira(3500)), BuyerAmount: ptr(money.Naira(2500))}, now)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fold(tc.given...)
			pr, err := PartialRefund(s, "m1", refunded, now)
			if err != nil {
				t.Fatal(err)
			}
			s = Apply(s, pr)
			ev, err := tc.settle(s)
			if err != nil {
				t.Fatal(err)
			}
			deltas := pr.Movement.Deltas()
			for a, d := range ev.(ledger.Entry).Ledger().Movement.Deltas() {
				deltas[a] += d
			}
			fee := s.Fee
			if deltas[buyerEscrow] != -s.Held() || deltas[sellerMain] != tc.seller || deltas[buyerMain] != tc.buyer ||
				deltas[merchantMain]+deltas[platform] != fee {
				t.Fatalf("deltas %v: want buyer escrow -%s, seller +%s, buyer +%s, fee %s", deltas, s.Held(), tc.seller, tc.buyer, fee)
			}
		})
	}
}
