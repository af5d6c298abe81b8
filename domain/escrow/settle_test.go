package escrow

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/domaintest"
	"github.com/escrowd/escrowd/domain/ids"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/webhook"
)

// Accounts of the fixtures.
var (
	buyerMain      = ledger.CustomerMain("b1")
	buyerEscrow    = ledger.CustomerEscrow("b1")
	sellerMain     = ledger.CustomerMain("s1")
	merchantMain   = ledger.MerchantMain("m1")
	merchantEscrow = ledger.MerchantEscrow("m1")
	platform       = ledger.PlatformRevenue("m1")
)

func post(from, to ledger.Account, amount money.Amount) ledger.Posting {
	return ledger.Posting{From: from, To: to, Amount: amount}
}

func movement(postings ...ledger.Posting) ledger.Movement {
	return ledger.Movement{MerchantID: "m1", Environment: domain.Test, Postings: postings}
}

// record is a success credit record of the release of e1 at now: its id
// derived from e1's and the suffix, its reference naming both.
func record(suffix string, typ ledger.Type, customerID string, amount, fee money.Amount) ledger.Record {
	return ledger.Record{ID: ids.Derived(now, "e1/"+suffix), Reference: "ESC-e1-" + suffix, Amount: amount, Fee: fee, Currency: "NGN",
		Status: ledger.Success, Type: typ, CreditType: ledger.Credit, CustomerID: customerID, MerchantID: "m1",
		Environment: domain.Test, EscrowDetails: &ledger.EscrowDetails{EscrowIDs: []string{"e1"}, PaymentTokens: []string{"PT_E1"}},
		CreatedAt: now, UpdatedAt: now}
}

// checkBalanced fails unless m validates and its deltas sum to zero.
func checkBalanced(t *testing.T, m ledger.Movement) {
	t.Helper()
	if err := m.Validate(); err != nil {
		t.Fatalf("movement does not validate: %v\n%+v", err, m)
	}
	var sum money.Amount
	for _, d := range m.Deltas() {
		sum += d
	}
	if sum != 0 {
		t.Fatalf("deltas sum to %s", sum)
	}
}

func TestFundingMovement(t *testing.T) {
	withFee := fold(link(), feeSet(money.Naira(500), true), funded("b1"))
	seller := fold(link(whoPays(Seller), func(c *Created) { c.ID = "e2" }), funded("b1"))
	both := fold(link(whoPays(Both), priced(money.Naira(1010), money.Naira(25)), func(c *Created) { c.ID = "e3" }),
		feeSet(money.Naira(1), true), funded("b1"))
	tests := []struct {
		name    string
		escrows []State
		want    ledger.Movement
	}{
		{name: "buyer pays, additional fee", escrows: []State{withFee},
			want: movement(post(buyerMain, buyerEscrow, money.Naira(10250)), post(buyerMain, merchantEscrow, money.Naira(500)))},
		{name: "no additional fee: no leg", escrows: []State{fold(link(), funded("b1"))},
			want: movement(post(buyerMain, buyerEscrow, money.Naira(10250)))},
		{name: "seller pays: only the amount is held", escrows: []State{seller},
			want: movement(post(buyerMain, buyerEscrow, money.Naira(10000)))},
		{name: "both pay an odd fee", escrows: []State{both},
			want: movement(post(buyerMain, buyerEscrow, money.Naira(1010)+1250), post(buyerMain, merchantEscrow, money.Naira(1)))},
		{name: "several escrows in one payment", escrows: []State{withFee, seller, both},
			want: movement(post(buyerMain, buyerEscrow, money.Naira(10250)), post(buyerMain, merchantEscrow, money.Naira(500)),
				post(buyerMain, buyerEscrow, money.Naira(10000)),
				post(buyerMain, buyerEscrow, money.Naira(1010)+1250), post(buyerMain, merchantEscrow, money.Naira(1)))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FundingMovement("m1", domain.Test, "b1", tt.escrows)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
			checkBalanced(t, got)
			var due money.Amount
			for _, s := range tt.escrows {
				due += s.Due()
			}
			if d := got.Deltas()[buyerMain]; d != -due {
				t.Fatalf("buyer main moves %s, want -%s", d, due)
			}
		})
	}
}

// funds is link(opts...) with an additional fee (0 = none), paid by b1.
func funds(additional money.Amount, opts ...func(*Created)) []domain.Event {
	evs := []domain.Event{link(opts...)}
	if additional > 0 {
		evs = append(evs, feeSet(additional, true))
	}
	return append(evs, funded("b1"))
}

func TestConfirm(t *testing.T) {
	odd := []func(*Created){whoPays(Both), priced(money.Naira(1010), money.Naira(25)),
		func(c *Created) { c.FeeTerms.CommissionBps = 3333 }}
	tests := []struct {
		name    string
		given   []domain.Event
		mutate  func(*State)
		buyer   string
		want    *Released
		wantErr error
	}{
		{name: "buyer pays, no additional fee", given: funds(0), buyer: "b1",
			want: &Released{Status: Completed, At: now,
				Movement: movement(post(buyerEscrow, sellerMain, money.Naira(10000)), post(buyerEscrow, merchantMain, money.Naira(125)),
					post(buyerEscrow, platform, money.Naira(125))),
				Records: []ledger.Record{record("release", ledger.EscrowRelease, "s1", money.Naira(10000), 0),
					record("commission", ledger.Commission, "", money.Naira(125), 0)}}},
		{name: "buyer pays, additional fee", given: funds(money.Naira(500)), buyer: "b1",
			want: &Released{Status: Completed, At: now,
				Movement: movement(post(buyerEscrow, sellerMain, money.Naira(10000)), post(buyerEscrow, merchantMain, money.Naira(125)),
					post(buyerEscrow, platform, money.Naira(125)), post(merchantEscrow, merchantMain, money.Naira(500))),
				Records: []ledger.Record{record("release", ledger.EscrowRelease, "s1", money.Naira(10000), 0),
					record("commission", ledger.Commission, "", money.Naira(125), 0),
					record("delivery", ledger.Delivery, "", money.Naira(500), 0)}}},
		{name: "seller pays, no additional fee", given: funds(0, whoPays(Seller)), buyer: "b1",
			want: &Released{Status: Completed, At: now,
				Movement: movement(post(buyerEscrow, sellerMain, money.Naira(9750)), post(buyerEscrow, merchantMain, money.Naira(125)),
					post(buyerEscrow, platform, money.Naira(125))),
				Records: []ledger.Record{record("release", ledger.EscrowRelease, "s1", money.Naira(9750), money.Naira(250)),
					record("commission", ledger.Commission, "", money.Naira(125), 0)}}},
		{name: "seller pays, additional fee", given: funds(money.Naira(500), whoPays(Seller)), buyer: "b1",
			want: &Released{Status: Completed, At: now,
				Movement: movement(post(buyerEscrow, sellerMain, money.Naira(9750)), post(buyerEscrow, merchantMain, money.Naira(125)),
					post(buyerEscrow, platform, money.Naira(125)), post(merchantEscrow, merchantMain, money.Naira(500))),
				Records: []ledger.Record{record("release", ledger.EscrowRelease, "s1", money.Naira(9750), money.Naira(250)),
					record("commission", ledger.Commission, "", money.Naira(125), 0),
					record("delivery", ledger.Delivery, "", money.Naira(500), 0)}}},
		{name: "both pay, no additional fee", given: funds(0, whoPays(Both)), buyer: "b1",
			want: &Released{Status: Completed, At: now,
				Movement: movement(post(buyerEscrow, sellerMain, money.Naira(9875)), post(buyerEscrow, merchantMain, money.Naira(125)),
					post(buyerEscrow, platform, money.Naira(125))),
				Records: []ledger.Record{record("release", ledger.EscrowRelease, "s1", money.Naira(9875), money.Naira(125)),
					record("commission", ledger.Commission, "", money.Naira(125), 0)}}},
		{name: "both pay, additional fee", given: funds(money.Naira(500), whoPays(Both)), buyer: "b1",
			want: &Released{Status: Completed, At: now,
				Movement: movement(post(buyerEscrow, sellerMain, money.Naira(9875)), post(buyerEscrow, merchantMain, money.Naira(125)),
					post(buyerEscrow, platform, money.Naira(125)), post(merchantEscrow, merchantMain, money.Naira(500))),
				Records: []ledger.Record{record("release", ledger.EscrowRelease, "s1", money.Naira(9875), money.Naira(125)),
					record("commission", ledger.Commission, "", money.Naira(125), 0),
					record("delivery", ledger.Delivery, "", money.Naira(500), 0)}}},
		{name: "both pay 25, commission a third rounded down", given: funds(0, odd...), buyer: "b1",
			want: &Released{Status: Completed, At: now,
				Movement: movement(post(buyerEscrow, sellerMain, money.Naira(1010)-1250), post(buyerEscrow, merchantMain, 833),
					post(buyerEscrow, platform, 1667)),
				Records: []ledger.Record{record("release", ledger.EscrowRelease, "s1", money.Naira(1010)-1250, 1250),
					record("commission", ledger.Commission, "", 833, 0)}}},
		{name: "merchant's own sale, buyer pays, additional fee", given: funds(money.Naira(500), merchantSale), buyer: "b1",
			want: &Released{Status: Completed, At: now,
				Movement: movement(post(buyerEscrow, merchantMain, money.Naira(10000)), post(buyerEscrow, merchantMain, money.Naira(125)),
					post(buyerEscrow, platform, money.Naira(125)), post(merchantEscrow, merchantMain, money.Naira(500))),
				Records: []ledger.Record{record("release", ledger.EscrowRelease, "", money.Naira(10000), 0),
					record("commission", ledger.Commission, "", money.Naira(125), 0),
					record("delivery", ledger.Delivery, "", money.Naira(500), 0)}}},
		{name: "merchant's own sale, seller pays", given: funds(0, merchantSale, whoPays(Seller)), buyer: "b1",
			want: &Released{Status: Completed, At: now,
				Movement: movement(post(buyerEscrow, merchantMain, money.Naira(9750)), post(buyerEscrow, merchantMain, money.Naira(125)),
					post(buyerEscrow, platform, money.Naira(125))),
				Records: []ledger.Record{record("release", ledger.EscrowRelease, "", money.Naira(9750), money.Naira(250)),
					record("commission", ledger.Commission, "", money.Naira(125), 0)}}},
		{name: "no commission: no commission record", given: funds(0, func(c *Created) { c.FeeTerms.CommissionBps = 0 }), buyer: "b1",
			want: &Released{Status: Completed, At: now,
				Movement: movement(post(buyerEscrow, sellerMain, money.Naira(10000)), post(buyerEscrow, platform, money.Naira(250))),
				Records:  []ledger.Record{record("release", ledger.EscrowRelease, "s1", money.Naira(10000), 0)}}},

		{name: "another customer", given: funds(0), buyer: "b2", wantErr: ErrActionNotAllowed},
		{name: "the seller", given: funds(0), buyer: "s1", wantErr: ErrActionNotAllowed},
		{name: "the merchant (no customer)", given: funds(0), buyer: "", wantErr: ErrActionNotAllowed},
		{name: "the merchant on its own sale", given: funds(0, merchantSale), buyer: "", wantErr: ErrActionNotAllowed},
		{name: "unpaid", given: []domain.Event{link()}, buyer: "b1", wantErr: ErrActionNotAllowed},
		{name: "unpaid, no buyer yet, by the merchant", given: []domain.Event{link()}, buyer: "", wantErr: ErrActionNotAllowed},
		{name: "never created", buyer: "b1", wantErr: ErrActionNotAllowed},
		{name: "twice", given: append(funds(0), Released{Status: Completed, At: now}), buyer: "b1", wantErr: ErrActionNotAllowed},
		{name: "after a claim", given: append(funds(0), Released{Status: Claimed, At: now}), buyer: "b1", wantErr: ErrActionNotAllowed},
		{name: "disputed", given: funds(0), mutate: func(s *State) { s.Status = Disputed }, buyer: "b1", wantErr: ErrUnderDispute},
		{name: "investigating", given: funds(0), mutate: func(s *State) { s.Status = Investigating }, buyer: "b1", wantErr: ErrUnderDispute},
		{name: "refunded", given: funds(0), mutate: func(s *State) { s.Status = Refunded }, buyer: "b1",
			wantErr: ErrActionNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fold(tt.given...)
			if tt.mutate != nil {
				tt.mutate(&s)
			}
			got, err := Confirm(s, tt.buyer, now)
			if refused(t, err, tt.wantErr, "") {
				return
			}
			if !reflect.DeepEqual(got, *tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, *tt.want)
			}
			checkBalanced(t, got.Movement)
			// The buyer's escrow balance gives back exactly what funding held.
			if d := got.Movement.Deltas()[buyerEscrow]; d != -s.Held() {
				t.Fatalf("buyer escrow moves %s, held %s", d, s.Held())
			}
			if d := got.Movement.Deltas()[merchantEscrow]; d != -s.AdditionalFee {
				t.Fatalf("merchant escrow moves %s, additional fee %s", d, s.AdditionalFee)
			}

			after := Apply(s, got)
			if after.Status != Completed || after.Status.Phase() != Closed || !after.CompletedAt.Equal(now) || !after.UpdatedAt.Equal(now) ||
				!reflect.DeepEqual(after.Logs, []string{"PENDING", "ONGOING", "COMPLETED"}) || !after.Status.Terminal() {
				t.Fatalf("state after confirm: %+v", after)
			}
			if _, err := Confirm(after, tt.buyer, now); !errors.Is(err, ErrActionNotAllowed) {
				t.Fatalf("second confirm: %v", err)
			}
			if _, err := Claim(after, s.SellerID, now.Add(365*24*time.Hour)); !errors.Is(err, ErrActionNotAllowed) {
				t.Fatalf("claim after confirm: %v", err)
			}
		})
	}
}

func TestClaim(t *testing.T) {
	days := funds(0)
	hours := funds(0, func(c *Created) { c.Terms.MaxDelivery, c.Terms.DeliveryTimeline = 5, "hours" })
	minutes := funds(0, func(c *Created) { c.Terms.MaxDelivery, c.Terms.DeliveryTimeline = 30, "minutes" })
	longest := funds(0, func(c *Created) { c.Terms.MaxDelivery = 365 })
	sevenDays := paidAt.Add(7 * 24 * time.Hour)
	release := Released{Status: Claimed,
		Movement: movement(post(buyerEscrow, sellerMain, money.Naira(10000)), post(buyerEscrow, merchantMain, money.Naira(125)),
			post(buyerEscrow, platform, money.Naira(125))),
		Records: []ledger.Record{record("release", ledger.EscrowRelease, "s1", money.Naira(10000), 0),
			record("commission", ledger.Commission, "", money.Naira(125), 0)}}
	tests := []struct {
		name      string
		given     []domain.Event
		mutate    func(*State)
		seller    string
		at        time.Time
		claimable time.Time
		want      *Released // At is set to at
		wantErr   error
	}{
		{name: "days: exactly at the end of the window", given: days, seller: "s1", at: sevenDays, claimable: sevenDays, want: &release},
		{name: "days: after the window", given: days, seller: "s1", at: now, claimable: sevenDays, want: &release},
		{name: "days: a nanosecond early", given: days, seller: "s1", at: sevenDays.Add(-1), claimable: sevenDays, wantErr: ErrNotClaimable},
		{name: "days: at payment", given: days, seller: "s1", at: paidAt, claimable: sevenDays, wantErr: ErrNotClaimable},
		{name: "hours: exactly 5 hours", given: hours, seller: "s1", at: paidAt.Add(5 * time.Hour), claimable: paidAt.Add(5 * time.Hour), want: &release},
		{name: "hours: a second early", given: hours, seller: "s1", at: paidAt.Add(5*time.Hour - time.Second),
			claimable: paidAt.Add(5 * time.Hour), wantErr: ErrNotClaimable},
		{name: "minutes: exactly 30 minutes", given: minutes, seller: "s1", at: paidAt.Add(30 * time.Minute),
			claimable: paidAt.Add(30 * time.Minute), want: &release},
		{name: "minutes: 29 minutes", given: minutes, seller: "s1", at: paidAt.Add(29 * time.Minute),
			claimable: paidAt.Add(30 * time.Minute), wantErr: ErrNotClaimable},
		{name: "365 days", given: longest, seller: "s1", at: paidAt.Add(365 * 24 * time.Hour),
			claimable: paidAt.Add(365 * 24 * time.Hour), want: &release},
		{name: "364 days of 365", given: longest, seller: "s1", at: paidAt.Add(364 * 24 * time.Hour),
			claimable: paidAt.Add(365 * 24 * time.Hour), wantErr: ErrNotClaimable},
		{name: "merchant's own sale, by the merchant", given: funds(0, merchantSale), seller: "", at: now, claimable: sevenDays,
			want: &Released{Status: Claimed,
				Movement: movement(post(buyerEscrow, merchantMain, money.Naira(10000)), post(buyerEscrow, merchantMain, money.Naira(125)),
					post(buyerEscrow, platform, money.Naira(125))),
				Records: []ledger.Record{record("release", ledger.EscrowRelease, "", money.Naira(10000), 0),
					record("commission", ledger.Commission, "", money.Naira(125), 0)}}},
		{name: "seller pays, additional fee", given: funds(money.Naira(500), whoPays(Seller)), seller: "s1", at: now, claimable: sevenDays,
			want: &Released{Status: Claimed,
				Movement: movement(post(buyerEscrow, sellerMain, money.Naira(9750)), post(buyerEscrow, merchantMain, money.Naira(125)),
					post(buyerEscrow, platform, money.Naira(125)), post(merchantEscrow, merchantMain, money.Naira(500))),
				Records: []ledger.Record{record("release", ledger.EscrowRelease, "s1", money.Naira(9750), money.Naira(250)),
					record("commission", ledger.Commission, "", money.Naira(125), 0),
					record("delivery", ledger.Delivery, "", money.Naira(500), 0)}}},

		{name: "the buyer", given: days, seller: "b1", at: now, wantErr: ErrActionNotAllowed},
		{name: "another customer", given: days, seller: "s2", at: now, wantErr: ErrActionNotAllowed},
		{name: "the merchant on a customer's sale", given: days, seller: "", at: now, wantErr: ErrActionNotAllowed},
		{name: "a customer on the merchant's sale", given: funds(0, merchantSale), seller: "s1", at: now, wantErr: ErrActionNotAllowed},
		{name: "unpaid", given: []domain.Event{link()}, seller: "s1", at: now, wantErr: ErrActionNotAllowed},
		{name: "never created", seller: "", at: now, wantErr: ErrActionNotAllowed},
		{name: "deleted", given: []domain.Event{link(), Deleted{At: t0}}, seller: "s1", at: now, wantErr: ErrActionNotAllowed},
		{name: "twice", given: append(funds(0), Released{Status: Claimed, At: now}), seller: "s1", at: now, wantErr: ErrActionNotAllowed},
		{name: "after the buyer confirmed", given: append(funds(0), Released{Status: Completed, At: now}), seller: "s1", at: now,
			wantErr: ErrActionNotAllowed},
		{name: "disputed", given: days, mutate: func(s *State) { s.Status = Disputed }, seller: "s1", at: now, wantErr: ErrUnderDispute},
		{name: "a stranger before the window: refused as not allowed", given: days, seller: "s2", at: paidAt, wantErr: ErrActionNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fold(tt.given...)
			if tt.mutate != nil {
				tt.mutate(&s)
			}
			if !tt.claimable.IsZero() && !s.ClaimableAt().Equal(tt.claimable) {
				t.Fatalf("ClaimableAt = %v, want %v", s.ClaimableAt(), tt.claimable)
			}
			got, err := Claim(s, tt.seller, tt.at)
			if refused(t, err, tt.wantErr, "") {
				return
			}
			want := *tt.want
			want.At = tt.at
			want.Records = append([]ledger.Record(nil), want.Records...)
			for i := range want.Records {
				r := &want.Records[i]
				r.ID, r.CreatedAt, r.UpdatedAt = ids.Derived(tt.at, "e1/"+strings.TrimPrefix(r.Reference, "ESC-e1-")), tt.at, tt.at
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got  %+v\nwant %+v", got, want)
			}
			checkBalanced(t, got.Movement)
			after := Apply(s, got)
			if after.Status != Claimed || after.Status.Phase() != Closed || !after.CompletedAt.Equal(tt.at) ||
				!reflect.DeepEqual(after.Logs, []string{"PENDING", "ONGOING", "CLAIMED"}) {
				t.Fatalf("state after claim: %+v", after)
			}
			if _, err := Confirm(after, "b1", tt.at); !errors.Is(err, ErrActionNotAllowed) {
				t.Fatalf("confirm after claim: %v", err)
			}
		})
	}
}

func TestRegistryRoundTrip(t *testing.T) {
	rel, err := Confirm(fold(funds(money.Naira(500), whoPays(Both))...), "b1", now)
	if err != nil {
		t.Fatal(err)
	}
	events := []domain.Event{
		VaultCreated{ID: "e1", PaymentToken: "PT_E1", MerchantID: "m1", Environment: domain.Test, Terms: Terms{Amount: 1000, Purpose: "p"},
			FeeTerms: fees, Fee: 25, Participants: []Participant{{CustomerID: "a", Amount: 1000, Status: ParticipantStaked, StakedAt: now}},
			Movement: movement(post(ledger.CustomerMain("a"), ledger.CustomerEscrow("a"), 1000)),
			Records:  []ledger.Record{record("stake-a", ledger.VaultStake, "a", 1000, 0)}, At: now},
		VaultSettled{Status: Refunded, WinnerID: "a", RefundedBy: "m1",
			Movement: movement(post(ledger.CustomerEscrow("a"), ledger.CustomerMain("a"), 975)),
			Records:  []ledger.Record{record("refund-a", ledger.VaultRefund, "a", 975, 25)}, At: now},
		link(multi(3), whoPays(Both), func(c *Created) {
			c.Terms.Description, c.Terms.CategoryID, c.AdditionalFee, c.AdditionalFeeRefundable = "d", "cat1", 4550, false
		}),
		link(clone, merchantSale),
		Edited{Terms: Terms{Amount: money.Naira(1010), Purpose: "p", Description: "d", WhoPays: Both, MaxDelivery: 3,
			DeliveryTimeline: "minutes", CategoryID: "c"}, Fee: money.Naira(25), AddImages: images(3, 2), Quantity: 4, At: now},
		Edited{Terms: link().Terms, Fee: money.Naira(250), Quantity: 1, At: now},
		AdditionalFeeSet{AdditionalFee: money.Naira(500), Refundable: false, At: now},
		AdditionalFeeSet{AdditionalFee: 0, Refundable: true, At: now},
		Deleted{At: now},
		UnitSold{CloneID: "e2", Remaining: 0, At: now},
		Funded{BuyerID: "b1", PaymentID: "p1", Paid: money.Naira(10125) + 50, ReleaseAt: now.Add(time.Hour), RemindAt: now,
			MilestoneDueAt: now.Add(2 * time.Hour), At: now},
		WindowExtended{By: 2, ReleaseAt: now.Add(3 * time.Hour), RemindAt: now.Add(2 * time.Hour), At: now},
		Reminded{Reminder: WindowEndingDeadline, At: now},
		Reminded{Reminder: MilestoneDueDeadline, MilestoneID: "m1", NextDueAt: now.Add(time.Hour), At: now},
		PartiallyRefunded{Amount: 300, RefundedBy: "m1", Movement: movement(post(buyerEscrow, buyerMain, 300)),
			Records: []ledger.Record{record("partial-refund-1", ledger.Refund, "b1", 300, 0)}, At: now},
		rel,
		Released{Status: Claimed, Movement: movement(post(buyerEscrow, sellerMain, 1)), Records: []ledger.Record{record("release", ledger.EscrowRelease, "s1", 1, 0)}, At: now},
		DisputeSubmitted{Entry: DisputeEntry{UserID: "b1", Name: "Ada Obi", Message: "never came", ProofURL: "http://x/f/1",
			Type: EntryBuyer, CreatedAt: now}, Status: Disputed, At: now},
		DisputeResolved{Status: Split, ResolvedBy: "m1", AdditionalFeeRefundable: false,
			Split:    &SplitResult{SellerAmount: 150, BuyerAmount: 50, Pool: 200, ResolvedAt: now},
			Entry:    &DisputeEntry{UserID: "m1", Name: "Shop", Message: "half", Type: EntryAdmin, CreatedAt: now},
			Movement: movement(post(buyerEscrow, sellerMain, 150)), Records: []ledger.Record{record("release", ledger.EscrowRelease, "s1", 150, 0)}, At: now},
		MilestonesSet{Terms: link().Terms, Fee: money.Naira(250), Converted: true, At: now, Milestones: []Milestone{
			{ID: "m1", Title: "a", Description: "d", Amount: money.Naira(4000), DueDate: &now, CustomerID: "c9", Status: MilestonePending},
			{ID: "m2", Title: "b", Amount: money.Naira(6000), Status: MilestonePending}}},
		MilestoneConfirmed{MilestoneID: "m1", Status: Completed, Movement: movement(post(buyerEscrow, sellerMain, 150)),
			Records: []ledger.Record{record("release-m1", ledger.EscrowRelease, "s1", 150, 0)}, At: now},
		MilestoneConfirmed{MilestoneID: "m1", Movement: movement(post(buyerEscrow, sellerMain, 150)),
			Records: []ledger.Record{record("release-m1", ledger.EscrowRelease, "s1", 150, 0)}, MilestoneDueAt: now.Add(time.Hour), At: now},
		webhook.RedeliveryRequested{DeliveryID: "d1", Event: "escrow.disputed", EscrowID: "e1", RequestedAt: now},
	}
	for i, back := range domaintest.RoundTrip(t, Registry, events...) {
		// Folding the decoded event is the same as folding the decided one.
		if base := fold(link()); !reflect.DeepEqual(Apply(base, back), Apply(base, events[i])) {
			t.Fatalf("%s: decoded event folds differently", back.EventType())
		}
	}
	if len(Registry) != 17 {
		t.Errorf("registry has %d types, want 17", len(Registry))
	}
}

// TestRedeliveryLeavesTheEscrowAsItWas: a webhook's redelivery is on the
// escrow's stream for its timeline only; in every status the escrow folds
// to the state it had.
func TestRedeliveryLeavesTheEscrowAsItWas(t *testing.T) {
	ev := webhook.RedeliveryRequested{DeliveryID: "d1", Event: "escrow.ongoing", EscrowID: "e1", RequestedAt: now.Add(time.Hour)}
	for name, s := range map[string]State{
		"pending": fold(link()),
		"ongoing": fold(funds(money.Naira(500), whoPays(Both))...),
	} {
		if got := Apply(s, ev); !reflect.DeepEqual(got, s) {
			t.Errorf("%s: a redelivery changed the escrow:\n%+v\nwas\n%+v", name, got, s)
		}
	}
}

func TestReleasedIsALedgerEntry(t *testing.T) {
	var ev domain.Event
	for _, given := range [][]domain.Event{funds(0), funds(money.Naira(500), whoPays(Both)), funds(money.Naira(1), merchantSale, whoPays(Seller))} {
		r, err := Confirm(fold(given...), "b1", now)
		if err != nil {
			t.Fatal(err)
		}
		ev = r
		entry, ok := ev.(ledger.Entry)
		if !ok {
			t.Fatal("Released is not a ledger.Entry")
		}
		eff := entry.Ledger()
		if eff.Movement == nil || !reflect.DeepEqual(*eff.Movement, r.Movement) || !reflect.DeepEqual(eff.Records, r.Records) {
			t.Fatalf("effect %+v of %+v", eff, r)
		}
		checkBalanced(t, *eff.Movement)
	}
	// Only Released moves money.
	for _, ev := range []domain.Event{Created{}, Edited{}, AdditionalFeeSet{}, Deleted{}, UnitSold{}, Funded{}} {
		if _, ok := ev.(ledger.Entry); ok {
			t.Errorf("%s is a ledger.Entry", ev.EventType())
		}
	}
}

// Oracles written from the fee and settlement rules, independent of the package's
// helpers.
func oracleFee(amount money.Amount, bps int64) money.Amount {
	naira := (amount.Kobo()*bps + 500_000) / 1_000_000
	return money.Amount(naira * 100)
}

func oracleBuyerShare(fee money.Amount, who WhoPays) money.Amount {
	switch who {
	case Buyer:
		return fee
	case Seller:
		return 0
	}
	return (fee + 1) / 2 // half, rounded half-up to the kobo
}

// For random escrows, funding then release leaves the buyer's escrow
// balance at zero, pays everyone exactly their share and sums to zero.
func TestFundAndReleaseConserveMoney(t *testing.T) {
	rng := rand.New(rand.NewPCG(20261121, 7))
	whos := []WhoPays{Buyer, Seller, Both}
	for i := 0; i < 3000; i++ {
		amount := money.Naira(1000 + rng.Int64N(10_000_000-1000+1))
		who := whos[rng.IntN(3)]
		var additional money.Amount
		if rng.IntN(3) > 0 {
			additional = money.Naira(rng.Int64N(100_000))
		}
		ft := fees
		if rng.IntN(2) == 0 {
			ft = FeeTerms{EscrowFeeBps: rng.Int64N(1001), CommissionBps: rng.Int64N(10_001)}
		}
		seller := "s1"
		if rng.IntN(4) == 0 {
			seller = ""
		}
		qty := 1 + rng.IntN(3)
		claim := rng.IntN(2) == 0

		c, err := Create("e1", "PT_E1", "m1", domain.Live, seller, ft,
			Draft{Amount: amount, Purpose: "x", WhoPays: string(who), TotalQuantity: &qty}, t0)
		if err != nil {
			t.Fatal(err)
		}
		s := fold(c)
		if additional > 0 || rng.IntN(2) == 0 {
			set, err := SetAdditionalFee(s, additional, nil, t0)
			if err != nil {
				t.Fatal(err)
			}
			s = Apply(s, set)
		}
		buy, err := Buy(s, "b1", "p1", "e2", "PT_E2", paidAt)
		if err != nil {
			t.Fatal(err)
		}
		e := buy.Funded
		fund := FundingMovement("m1", domain.Live, "b1", []State{e})
		var rel Released
		if claim {
			rel, err = Claim(e, seller, e.ClaimableAt())
		} else {
			rel, err = Confirm(e, "b1", now)
		}
		if err != nil {
			t.Fatal(err)
		}

		fee := oracleFee(amount, ft.EscrowFeeBps)
		buyerShare := oracleBuyerShare(fee, who)
		sellerShare := fee - buyerShare
		commission := money.Amount(fee.Kobo() * ft.CommissionBps / 10_000)
		if e.Fee != fee || e.Due() != amount+buyerShare+additional {
			t.Fatalf("case %d: fee %s due %s; want fee %s due %s", i, e.Fee, e.Due(), fee, amount+buyerShare+additional)
		}

		total := map[ledger.Account]money.Amount{}
		for _, m := range []ledger.Movement{fund, rel.Movement} {
			if err := m.Validate(); err != nil {
				t.Fatalf("case %d: %v", i, err)
			}
			for a, d := range m.Deltas() {
				total[a] += d
			}
		}
		payee := ledger.CustomerMain("s1")
		if seller == "" {
			payee = ledger.MerchantMain("m1")
		}
		want := map[ledger.Account]money.Amount{
			ledger.CustomerMain("b1"):    -(amount + buyerShare + additional),
			ledger.CustomerEscrow("b1"):  0,
			ledger.MerchantEscrow("m1"):  0,
			ledger.MerchantMain("m1"):    commission + additional,
			ledger.PlatformRevenue("m1"): fee - commission,
			ledger.CustomerMain("s1"):    0,
		}
		want[payee] += amount - sellerShare
		var sum money.Amount
		for a, d := range total {
			sum += d
			if _, ok := want[a]; !ok && d != 0 {
				t.Fatalf("case %d: unexpected account %s moves %s", i, a, d)
			}
		}
		for a, w := range want {
			if total[a] != w {
				t.Fatalf("case %d (amount %s, %s pays, additional %s, fees %+v, seller %q): %s moves %s, want %s",
					i, amount, who, additional, ft, seller, a, total[a], w)
			}
		}
		if sum != 0 {
			t.Fatalf("case %d: postings sum to %s", i, sum)
		}
		// The seller's record is what the seller received, its fee the seller's share.
		if r := rel.Records[0]; r.Type != ledger.EscrowRelease || r.Amount != amount-sellerShare || r.Fee != sellerShare ||
			r.CustomerID != seller || r.Environment != domain.Live || r.EscrowDetails.EscrowIDs[0] != e.ID {
			t.Fatalf("case %d: release record %+v", i, r)
		}
	}
}
