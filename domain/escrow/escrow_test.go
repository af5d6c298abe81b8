package escrow

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/money"
)

var (
	t0     = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC) // the link is created
	paidAt = t0.Add(time.Hour)                              // the fixture's payment
	now    = paidAt.Add(8 * 24 * time.Hour)                 // the command under test
)

// fees is the default policy: 2.5% escrow fee, half of it the merchant's.
var fees = FeeTerms{EscrowFeeBps: 250, CommissionBps: 5000}

func ptr[T any](v T) *T { return &v }

func fold(events ...domain.Event) State {
	var s State
	for _, e := range events {
		s = Apply(s, e)
	}
	return s
}

func images(from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("https://files.test/%d.png", from+i)
	}
	return out
}

// link is an unpaid single-unit link: 10,000 naira sold by s1, the buyer
// pays the 250 fee.
func link(opts ...func(*Created)) Created {
	c := Created{ID: "e1", PaymentToken: "PT_E1", MerchantID: "m1", Environment: domain.Test, SellerID: "s1",
		Terms:    Terms{Amount: money.Naira(10000), Purpose: "Phone", WhoPays: Buyer, MaxDelivery: 7, DeliveryTimeline: "days"},
		FeeTerms: fees, Fee: money.Naira(250), AdditionalFeeRefundable: true, ImageURLs: images(0, 1), TotalQuantity: 1,
		Channel: "api", At: t0}
	for _, o := range opts {
		o(&c)
	}
	return c
}

func merchantSale(c *Created)          { c.SellerID = "" }
func multi(n int) func(*Created)       { return func(c *Created) { c.TotalQuantity = n } }
func whoPays(w WhoPays) func(*Created) { return func(c *Created) { c.Terms.WhoPays = w } }

// priced sets the amount and its fee (both in kobo).
func priced(amount, fee money.Amount) func(*Created) {
	return func(c *Created) { c.Terms.Amount, c.Fee = amount, fee }
}

func clone(c *Created) { c.ID, c.PaymentToken, c.ParentID = "e2", "PT_E2", "e1" }

func funded(buyer string) Funded {
	return Funded{BuyerID: buyer, PaymentID: "p1", Paid: money.Naira(10250), At: paidAt}
}

func feeSet(fee money.Amount, refundable bool) AdditionalFeeSet {
	return AdditionalFeeSet{AdditionalFee: fee, Refundable: refundable, At: t0.Add(time.Minute)}
}

// refused checks err against the wanted refusal (a sentinel matched with
// errors.Is, or a 400 with msg) and reports whether one was wanted.
func refused(t *testing.T, err, wantErr error, wantMsg string) bool {
	t.Helper()
	switch {
	case wantErr != nil:
		if !errors.Is(err, wantErr) {
			t.Fatalf("err = %v, want %v", err, wantErr)
		}
		return true
	case wantMsg != "":
		if err == nil || domain.ErrorMessage(err) != wantMsg || domain.ErrorCode(err) != domain.Invalid {
			t.Fatalf("err = %v, want 400 %q", err, wantMsg)
		}
		return true
	}
	if err != nil {
		t.Fatalf("unexpected error %v", err)
	}
	return false
}

func TestErrorMessages(t *testing.T) {
	for err, want := range map[*domain.Error]string{
		ErrNotFound:         "Escrow not found",
		ErrOtherMerchant:    "Escrow does not belong to this merchant",
		ErrActionNotAllowed: "Action not allowed",
		ErrNotCheckoutable:  "Escrow is not in a valid state for checkout",
		ErrOwnEscrow:        "Seller cannot pay for own escrow",
		ErrSoldOut:          "Escrow is sold out",
		ErrNotClaimable:     "Escrow cannot be claimed yet",
		ErrFeeFrozen:        "An additional fee can only be updated while the escrow is pending payment",
		ErrNegativeFee:      "additionalFee cannot be negative",
		ErrAmountMismatch:   "Amount mismatch",
	} {
		if domain.ErrorMessage(err) != want || domain.ErrorCode(err) != domain.Invalid {
			t.Errorf("%v: code %s message %q, want 400 %q", err, domain.ErrorCode(err), domain.ErrorMessage(err), want)
		}
	}
}

func TestCreate(t *testing.T) {
	const (
		msgAmount   = "amount must be an integer of at least 1000"
		msgPurpose  = "purpose is required"
		msgLong     = "purpose must be at most 200 characters"
		msgDescr    = "description must be at most 2000 characters"
		msgWhoPays  = "whoPays must be one of buyer, seller, both"
		msgDelivery = "maxDelivery must be an integer between 1 and 365"
		msgTimeline = "deliveryTimeline must be one of minutes, hours, days"
		msgQuantity = "totalQuantity must be an integer between 1 and 10000"
		msgImages   = "imageUrl accepts at most 5 images"
	)
	draft := func(f func(*Draft)) Draft {
		d := Draft{Amount: money.Naira(10000), Purpose: "Phone", WhoPays: "buyer"}
		if f != nil {
			f(&d)
		}
		return d
	}
	// want is the Created of draft(nil) by s1, changed by f.
	want := func(f func(*Created)) *Created {
		c := Created{ID: "e1", PaymentToken: "PT_E1", MerchantID: "m1", Environment: domain.Test, SellerID: "s1",
			Terms:    Terms{Amount: 1_000_000, Purpose: "Phone", WhoPays: Buyer, MaxDelivery: 7, DeliveryTimeline: "days"},
			FeeTerms: fees, Fee: 25_000, AdditionalFeeRefundable: true, ImageURLs: []string{}, TotalQuantity: 1,
			Channel: "api", At: t0}
		if f != nil {
			f(&c)
		}
		return &c
	}
	tests := []struct {
		name    string
		seller  string
		in      Draft
		want    *Created
		wantMsg string
	}{
		{name: "defaults: 7 days, quantity 1, refundable, api, 2.5% fee", seller: "s1", in: draft(nil), want: want(nil)},
		{name: "every field set, merchant selling as itself", seller: "",
			in: draft(func(d *Draft) {
				d.Purpose, d.Description, d.WhoPays, d.MaxDelivery, d.DeliveryTimeline = "  Laptop ", " used ", "both", ptr(3), "hours"
				d.TotalQuantity, d.CategoryID, d.ImageURLs = ptr(4), "cat1", images(0, 5)
			}),
			want: want(func(c *Created) {
				c.SellerID = ""
				c.Terms = Terms{Amount: 1_000_000, Purpose: "Laptop", Description: " used ", WhoPays: Both, MaxDelivery: 3,
					DeliveryTimeline: "hours", CategoryID: "cat1"}
				c.ImageURLs, c.TotalQuantity = images(0, 5), 4
			})},
		{name: "seller pays", seller: "s1", in: draft(func(d *Draft) { d.WhoPays = "seller" }),
			want: want(func(c *Created) { c.Terms.WhoPays = Seller })},
		{name: "minutes", seller: "s1", in: draft(func(d *Draft) { d.DeliveryTimeline = "minutes" }),
			want: want(func(c *Created) { c.Terms.DeliveryTimeline = "minutes" })},
		{name: "maxDelivery 1", seller: "s1", in: draft(func(d *Draft) { d.MaxDelivery = ptr(1) }),
			want: want(func(c *Created) { c.Terms.MaxDelivery = 1 })},
		{name: "maxDelivery 365", seller: "s1", in: draft(func(d *Draft) { d.MaxDelivery = ptr(365) }),
			want: want(func(c *Created) { c.Terms.MaxDelivery = 365 })},
		{name: "exactly the minimum amount", seller: "s1", in: draft(func(d *Draft) { d.Amount = money.Naira(1000) }),
			want: want(func(c *Created) { c.Terms.Amount, c.Fee = 100_000, 2_500 })},
		{name: "purpose of exactly 200 characters", seller: "s1", in: draft(func(d *Draft) { d.Purpose = strings.Repeat("p", 200) }),
			want: want(func(c *Created) { c.Terms.Purpose = strings.Repeat("p", 200) })},
		{name: "purpose of 200 multi-byte characters", seller: "s1", in: draft(func(d *Draft) { d.Purpose = strings.Repeat("ọ", 200) }),
			want: want(func(c *Created) { c.Terms.Purpose = strings.Repeat("ọ", 200) })},
		{name: "description of 2000 multi-byte characters", seller: "s1", in: draft(func(d *Draft) { d.Description = strings.Repeat("é", 2000) }),
			want: want(func(c *Created) { c.Terms.Description = strings.Repeat("é", 2000) })},

		{name: "amount below 1000", in: draft(func(d *Draft) { d.Amount = money.Naira(999) }), wantMsg: msgAmount},
		{name: "amount a kobo below 1000", in: draft(func(d *Draft) { d.Amount = money.Naira(1000) - 1 }), wantMsg: msgAmount},
		{name: "amount not whole naira", in: draft(func(d *Draft) { d.Amount = money.Naira(1000) + 50 }), wantMsg: msgAmount},
		{name: "zero amount", in: draft(func(d *Draft) { d.Amount = 0 }), wantMsg: msgAmount},
		{name: "negative amount", in: draft(func(d *Draft) { d.Amount = -money.Naira(5000) }), wantMsg: msgAmount},
		{name: "empty purpose", in: draft(func(d *Draft) { d.Purpose = "" }), wantMsg: msgPurpose},
		{name: "blank purpose", in: draft(func(d *Draft) { d.Purpose = " \t " }), wantMsg: msgPurpose},
		{name: "purpose of 201 characters", in: draft(func(d *Draft) { d.Purpose = strings.Repeat("p", 201) }), wantMsg: msgLong},
		{name: "purpose of 201 multi-byte characters", in: draft(func(d *Draft) { d.Purpose = strings.Repeat("ọ", 201) }), wantMsg: msgLong},
		{name: "description of 2001 characters", in: draft(func(d *Draft) { d.Description = strings.Repeat("d", 2001) }), wantMsg: msgDescr},
		{name: "whoPays missing", in: draft(func(d *Draft) { d.WhoPays = "" }), wantMsg: msgWhoPays},
		{name: "whoPays capitalised", in: draft(func(d *Draft) { d.WhoPays = "Buyer" }), wantMsg: msgWhoPays},
		{name: "whoPays merchant", in: draft(func(d *Draft) { d.WhoPays = "merchant" }), wantMsg: msgWhoPays},
		{name: "maxDelivery 0", in: draft(func(d *Draft) { d.MaxDelivery = ptr(0) }), wantMsg: msgDelivery},
		{name: "maxDelivery 366", in: draft(func(d *Draft) { d.MaxDelivery = ptr(366) }), wantMsg: msgDelivery},
		{name: "maxDelivery negative", in: draft(func(d *Draft) { d.MaxDelivery = ptr(-1) }), wantMsg: msgDelivery},
		{name: "timeline weeks", in: draft(func(d *Draft) { d.DeliveryTimeline = "weeks" }), wantMsg: msgTimeline},
		{name: "timeline capitalised", in: draft(func(d *Draft) { d.DeliveryTimeline = "Days" }), wantMsg: msgTimeline},
		{name: "quantity 0", in: draft(func(d *Draft) { d.TotalQuantity = ptr(0) }), wantMsg: msgQuantity},
		{name: "quantity negative", in: draft(func(d *Draft) { d.TotalQuantity = ptr(-2) }), wantMsg: msgQuantity},
		{name: "quantity past the cap", in: draft(func(d *Draft) { d.TotalQuantity = ptr(MaxQuantity + 1) }), wantMsg: msgQuantity},
		{name: "quantity near 2^63", in: draft(func(d *Draft) { d.TotalQuantity = ptr(1 << 62) }), wantMsg: msgQuantity},
		{name: "6 images", in: draft(func(d *Draft) { d.ImageURLs = images(0, 6) }), wantMsg: msgImages},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Create("e1", "PT_E1", "m1", domain.Test, tt.seller, fees, tt.in, t0)
			if refused(t, err, nil, tt.wantMsg) {
				if !reflect.DeepEqual(got, Created{}) {
					t.Fatalf("refused Create returned %+v", got)
				}
				return
			}
			if !reflect.DeepEqual(got, *tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, *tt.want)
			}
		})
	}
}

func TestCreateCopiesImages(t *testing.T) {
	in := images(0, 2)
	c, err := Create("e1", "PT_E1", "m1", domain.Test, "s1", fees, Draft{Amount: money.Naira(1000), Purpose: "x", WhoPays: "buyer", ImageURLs: in}, t0)
	if err != nil {
		t.Fatal(err)
	}
	in[0] = "changed"
	if c.ImageURLs[0] != "https://files.test/0.png" {
		t.Fatal("Created shares the draft's image slice")
	}
}

func TestCreatedState(t *testing.T) {
	for _, tt := range []struct {
		name      string
		ev        Created
		wantMulti bool
	}{
		{name: "one unit", ev: link()},
		{name: "two units", ev: link(multi(2)), wantMulti: true},
		{name: "a clone of a multi-unit link", ev: link(clone)},
		{name: "a clone is never multi-unit", ev: link(clone, multi(3))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := fold(tt.ev)
			if s.MultiUnit != tt.wantMulti {
				t.Fatalf("MultiUnit = %v, want %v", s.MultiUnit, tt.wantMulti)
			}
			if !s.Exists() || s.Status != Pending || s.Status.Phase() != AwaitingPayment || s.AdditionalFee != 0 ||
				!s.AdditionalFeeRefundable || !reflect.DeepEqual(s.Logs, []string{"PENDING"}) ||
				!s.CreatedAt.Equal(t0) || !s.UpdatedAt.Equal(t0) {
				t.Fatalf("state after Created: %+v", s)
			}
		})
	}
	if (State{}).Exists() {
		t.Error("the zero state exists")
	}
	if !fold(link(merchantSale)).IsMerchantSale() || fold(link()).IsMerchantSale() {
		t.Error("IsMerchantSale")
	}
}

func TestFee(t *testing.T) {
	for _, tt := range []struct {
		amount, want money.Amount
		bps          int64
	}{
		{amount: money.Naira(1000), bps: 250, want: money.Naira(25)},
		{amount: money.Naira(1010), bps: 250, want: money.Naira(25)},            // 25.25
		{amount: money.Naira(1019), bps: 250, want: money.Naira(25)},            // 25.475
		{amount: money.Naira(1020), bps: 250, want: money.Naira(26)},            // 25.5 rounds up
		{amount: money.Naira(1030), bps: 250, want: money.Naira(26)},            // 25.75
		{amount: money.Naira(10000), bps: 250, want: money.Naira(250)},          //
		{amount: money.Naira(123450), bps: 250, want: money.Naira(3086)},        // 3086.25
		{amount: money.Naira(10_000_000), bps: 250, want: money.Naira(250_000)}, //
		{amount: money.Naira(1050), bps: 100, want: money.Naira(11)},            // 10.5 at 1%
		{amount: money.Naira(1000), bps: 0, want: 0},
	} {
		if got := Fee(tt.amount, tt.bps); got != tt.want {
			t.Errorf("Fee(%s, %d) = %s, want %s", tt.amount, tt.bps, got, tt.want)
		}
		c, err := Create("e1", "PT_E1", "m1", domain.Test, "s1", FeeTerms{EscrowFeeBps: tt.bps, CommissionBps: 5000},
			Draft{Amount: tt.amount, Purpose: "x", WhoPays: "buyer"}, t0)
		if err != nil || c.Fee != tt.want {
			t.Errorf("Create(%s) fee = %s, %v; want %s", tt.amount, c.Fee, err, tt.want)
		}
	}
}

func TestFeeShares(t *testing.T) {
	for _, tt := range []struct {
		fee           money.Amount
		who           WhoPays
		buyer, seller money.Amount
	}{
		{fee: money.Naira(250), who: Buyer, buyer: money.Naira(250)},
		{fee: money.Naira(250), who: Seller, seller: money.Naira(250)},
		{fee: money.Naira(250), who: Both, buyer: money.Naira(125), seller: money.Naira(125)},
		{fee: money.Naira(25), who: Both, buyer: 1250, seller: 1250},
		{fee: money.Naira(1), who: Both, buyer: 50, seller: 50},
		{fee: money.Naira(3087), who: Both, buyer: 154_350, seller: 154_350},
		{fee: 2501, who: Both, buyer: 1251, seller: 1250}, // 12.505: the buyer's half rounds up
		{fee: 3, who: Both, buyer: 2, seller: 1},
		{fee: 1, who: Both, buyer: 1, seller: 0},
		{fee: 0, who: Both},
		{fee: 0, who: Buyer},
		{fee: 0, who: Seller},
	} {
		got := FeeShares(tt.fee, tt.who)
		if got != (Shares{Buyer: tt.buyer, Seller: tt.seller}) {
			t.Errorf("FeeShares(%d kobo, %s) = %+v, want buyer %d seller %d", tt.fee, tt.who, got, tt.buyer, tt.seller)
		}
		if got.Buyer+got.Seller != tt.fee {
			t.Errorf("FeeShares(%d kobo, %s) does not add up to the fee", tt.fee, tt.who)
		}
	}
}

func TestCommission(t *testing.T) {
	for _, tt := range []struct {
		fee, want money.Amount
		bps       int64
	}{
		{fee: money.Naira(25), bps: 5000, want: 1250},
		{fee: money.Naira(25), bps: 3333, want: 833},  // 8.3325 rounds down
		{fee: money.Naira(25), bps: 6667, want: 1666}, // 16.6675 rounds down too
		{fee: 2501, bps: 5000, want: 1250},            // 12.505
		{fee: 1, bps: 5000, want: 0},
		{fee: money.Naira(250), bps: 0, want: 0},
		{fee: money.Naira(250), bps: 10_000, want: money.Naira(250)},
		{fee: money.Naira(250_000), bps: 5000, want: money.Naira(125_000)},
	} {
		if got := Commission(tt.fee, tt.bps); got != tt.want {
			t.Errorf("Commission(%d kobo, %d) = %d, want %d", tt.fee, tt.bps, got, tt.want)
		}
	}
}

func TestEdit(t *testing.T) {
	const msgImages = "imageUrl accepts at most 20 images in total"
	terms := Terms{Amount: money.Naira(10000), Purpose: "Phone", WhoPays: Buyer, MaxDelivery: 7, DeliveryTimeline: "days"}
	with := func(f func(*Terms)) Terms { t := terms; f(&t); return t }
	twenty := []domain.Event{link(func(c *Created) { c.ImageURLs = images(0, 5) }), Edited{Terms: terms, Fee: money.Naira(250), AddImages: images(5, 15), Quantity: 1, At: t0}}
	tests := []struct {
		name    string
		given   []domain.Event
		seller  string
		p       Patch
		want    *Edited
		wantErr error
		wantMsg string
	}{
		{name: "nothing changed", given: []domain.Event{link()}, seller: "s1",
			want: &Edited{Terms: terms, Fee: money.Naira(250), Quantity: 1, At: now}},
		{name: "amount: fee recomputed", given: []domain.Event{link()}, seller: "s1", p: Patch{Amount: ptr(money.Naira(20000))},
			want: &Edited{Terms: with(func(t *Terms) { t.Amount = money.Naira(20000) }), Fee: money.Naira(500), Quantity: 1, At: now}},
		{name: "amount: fee rounded half-up", given: []domain.Event{link()}, seller: "s1", p: Patch{Amount: ptr(money.Naira(1020))},
			want: &Edited{Terms: with(func(t *Terms) { t.Amount = money.Naira(1020) }), Fee: money.Naira(26), Quantity: 1, At: now}},
		{name: "fee recomputed with the rates frozen at creation",
			given: []domain.Event{link(func(c *Created) {
				c.FeeTerms, c.Fee = FeeTerms{EscrowFeeBps: 100, CommissionBps: 5000}, money.Naira(100)
			})},
			seller: "s1", p: Patch{Amount: ptr(money.Naira(1050))},
			want: &Edited{Terms: with(func(t *Terms) { t.Amount = money.Naira(1050) }), Fee: money.Naira(11), Quantity: 1, At: now}},
		{name: "every field", given: []domain.Event{link()}, seller: "s1",
			p: Patch{Purpose: ptr("  Tablet "), Description: ptr("boxed"), WhoPays: ptr("both"), MaxDelivery: ptr(30),
				DeliveryTimeline: ptr("minutes"), TotalQuantity: ptr(3), CategoryID: ptr("cat2"), AddImages: images(1, 2)},
			want: &Edited{Terms: Terms{Amount: money.Naira(10000), Purpose: "Tablet", Description: "boxed", WhoPays: Both, MaxDelivery: 30,
				DeliveryTimeline: "minutes", CategoryID: "cat2"}, Fee: money.Naira(250), AddImages: images(1, 2), Quantity: 3, At: now}},
		{name: "merchant edits its own sale", given: []domain.Event{link(merchantSale)}, seller: "", p: Patch{WhoPays: ptr("seller")},
			want: &Edited{Terms: with(func(t *Terms) { t.WhoPays = Seller }), Fee: money.Naira(250), Quantity: 1, At: now}},
		{name: "images up to 20 in total", given: twenty[:1], seller: "s1", p: Patch{AddImages: images(5, 15)},
			want: &Edited{Terms: terms, Fee: money.Naira(250), AddImages: images(5, 15), Quantity: 1, At: now}},
		{name: "no image to add at 20", given: twenty, seller: "s1", p: Patch{Purpose: ptr("x")},
			want: &Edited{Terms: with(func(t *Terms) { t.Purpose = "x" }), Fee: money.Naira(250), Quantity: 1, At: now}},
		{name: "multi-unit link restocked after selling out",
			given:  []domain.Event{link(multi(2)), UnitSold{CloneID: "c1", Remaining: 1}, UnitSold{CloneID: "c2", Remaining: 0}},
			seller: "s1", p: Patch{TotalQuantity: ptr(5)},
			want: &Edited{Terms: terms, Fee: money.Naira(250), Quantity: 5, At: now}},
		{name: "sold-out multi-unit link edited without restocking",
			given:  []domain.Event{link(multi(2)), UnitSold{CloneID: "c1", Remaining: 1}, UnitSold{CloneID: "c2", Remaining: 0}},
			seller: "s1", p: Patch{Purpose: ptr("Tablet")},
			want: &Edited{Terms: with(func(t *Terms) { t.Purpose = "Tablet" }), Fee: money.Naira(250), Quantity: 0, At: now}},

		{name: "another customer", given: []domain.Event{link()}, seller: "s2", wantErr: ErrActionNotAllowed},
		{name: "the buyer after payment", given: []domain.Event{link(), funded("b1")}, seller: "b1", wantErr: ErrActionNotAllowed},
		{name: "the merchant on a customer's link", given: []domain.Event{link()}, seller: "", wantErr: ErrActionNotAllowed},
		{name: "a customer on the merchant's sale", given: []domain.Event{link(merchantSale)}, seller: "s1", wantErr: ErrActionNotAllowed},
		{name: "after payment", given: []domain.Event{link(), funded("b1")}, seller: "s1", wantErr: ErrActionNotAllowed},
		{name: "after release", given: []domain.Event{link(), funded("b1"), Released{Status: Completed, At: now}}, seller: "s1",
			wantErr: ErrActionNotAllowed},
		{name: "deleted", given: []domain.Event{link(), Deleted{At: t0}}, seller: "s1", wantErr: ErrActionNotAllowed},
		{name: "never created", seller: "s1", wantErr: ErrActionNotAllowed},
		{name: "an unpaid clone", given: []domain.Event{link(clone)}, seller: "s1", wantErr: ErrActionNotAllowed},
		{name: "a funded clone", given: []domain.Event{link(clone), funded("b1")}, seller: "s1", wantErr: ErrActionNotAllowed},
		{name: "21st image", given: twenty, seller: "s1", p: Patch{AddImages: images(20, 1)}, wantMsg: msgImages},
		{name: "16 images onto 5", given: twenty[:1], seller: "s1", p: Patch{AddImages: images(5, 16)}, wantMsg: msgImages},
		{name: "amount below 1000", given: []domain.Event{link()}, seller: "s1", p: Patch{Amount: ptr(money.Naira(999))},
			wantMsg: "amount must be an integer of at least 1000"},
		{name: "amount not whole naira", given: []domain.Event{link()}, seller: "s1", p: Patch{Amount: ptr(money.Naira(1500) + 1)},
			wantMsg: "amount must be an integer of at least 1000"},
		{name: "blank purpose", given: []domain.Event{link()}, seller: "s1", p: Patch{Purpose: ptr("  ")}, wantMsg: "purpose is required"},
		{name: "long purpose", given: []domain.Event{link()}, seller: "s1", p: Patch{Purpose: ptr(strings.Repeat("p", 201))},
			wantMsg: "purpose must be at most 200 characters"},
		{name: "long description", given: []domain.Event{link()}, seller: "s1", p: Patch{Description: ptr(strings.Repeat("d", 2001))},
			wantMsg: "description must be at most 2000 characters"},
		{name: "bad whoPays", given: []domain.Event{link()}, seller: "s1", p: Patch{WhoPays: ptr("nobody")},
			wantMsg: "whoPays must be one of buyer, seller, both"},
		{name: "maxDelivery 0", given: []domain.Event{link()}, seller: "s1", p: Patch{MaxDelivery: ptr(0)},
			wantMsg: "maxDelivery must be an integer between 1 and 365"},
		{name: "maxDelivery 366", given: []domain.Event{link()}, seller: "s1", p: Patch{MaxDelivery: ptr(366)},
			wantMsg: "maxDelivery must be an integer between 1 and 365"},
		{name: "bad timeline", given: []domain.Event{link()}, seller: "s1", p: Patch{DeliveryTimeline: ptr("weeks")},
			wantMsg: "deliveryTimeline must be one of minutes, hours, days"},
		{name: "quantity 0", given: []domain.Event{link(multi(3))}, seller: "s1", p: Patch{TotalQuantity: ptr(0)},
			wantMsg: "totalQuantity must be an integer between 1 and 10000"},
		{name: "quantity past the cap", given: []domain.Event{link(multi(3))}, seller: "s1", p: Patch{TotalQuantity: ptr(MaxQuantity + 1)},
			wantMsg: "totalQuantity must be an integer between 1 and 10000"},
		{name: "the refusal of a stranger comes before validation", given: []domain.Event{link()}, seller: "s2",
			p: Patch{Amount: ptr(money.Naira(1))}, wantErr: ErrActionNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Edit(fold(tt.given...), tt.seller, tt.p, now)
			if refused(t, err, tt.wantErr, tt.wantMsg) {
				return
			}
			if !reflect.DeepEqual(got, *tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, *tt.want)
			}
		})
	}
}

func TestEditedState(t *testing.T) {
	s := fold(link(), Edited{Terms: Terms{Amount: money.Naira(2000), Purpose: "x", WhoPays: Seller, MaxDelivery: 1,
		DeliveryTimeline: "hours"}, Fee: money.Naira(50), AddImages: images(1, 2), Quantity: 1, At: now})
	if s.Terms.Amount != money.Naira(2000) || s.Fee != money.Naira(50) || s.Terms.WhoPays != Seller ||
		!reflect.DeepEqual(s.ImageURLs, images(0, 3)) || !s.UpdatedAt.Equal(now) || !s.CreatedAt.Equal(t0) ||
		s.Status != Pending || s.Status.Phase() != AwaitingPayment {
		t.Fatalf("state after Edited: %+v", s)
	}

	// Quantity 1 on a multi-unit link keeps it multi-unit: its last unit
	// is sold as a clone too, so the link itself is never funded.
	m := fold(link(multi(3)))
	e, err := Edit(m, "s1", Patch{TotalQuantity: ptr(1)}, now)
	if err != nil {
		t.Fatal(err)
	}
	m = Apply(m, e)
	if !m.MultiUnit || m.TotalQuantity != 1 {
		t.Fatalf("multi-unit link edited to 1: MultiUnit %v, quantity %d", m.MultiUnit, m.TotalQuantity)
	}
	buy, err := Buy(m, "b1", "p1", "e2", "PT_E2", now)
	if err != nil || buy.Clone == nil || !reflect.DeepEqual(buy.Link, []domain.Event{UnitSold{CloneID: "e2", Remaining: 0, At: now}}) {
		t.Fatalf("buying the last unit: %+v, %v", buy, err)
	}

	// More than one unit makes a single link multi-unit.
	one := fold(link())
	e, err = Edit(one, "s1", Patch{TotalQuantity: ptr(2)}, now)
	if err != nil {
		t.Fatal(err)
	}
	if one = Apply(one, e); !one.MultiUnit || one.TotalQuantity != 2 {
		t.Fatalf("single link edited to 2: MultiUnit %v, quantity %d", one.MultiUnit, one.TotalQuantity)
	}
}

func TestDelete(t *testing.T) {
	tests := []struct {
		name    string
		given   []domain.Event
		seller  string
		wantErr error
	}{
		{name: "the seller, unpaid", given: []domain.Event{link()}, seller: "s1"},
		{name: "the merchant, its own sale", given: []domain.Event{link(merchantSale)}, seller: ""},
		{name: "a multi-unit link with units sold", given: []domain.Event{link(multi(3)), UnitSold{CloneID: "e2", Remaining: 2}}, seller: "s1"},
		{name: "with an additional fee", given: []domain.Event{link(), feeSet(money.Naira(500), true)}, seller: "s1"},

		{name: "another customer", given: []domain.Event{link()}, seller: "s2", wantErr: ErrActionNotAllowed},
		{name: "the merchant on a customer's link", given: []domain.Event{link()}, seller: "", wantErr: ErrActionNotAllowed},
		{name: "a customer on the merchant's sale", given: []domain.Event{link(merchantSale)}, seller: "s1", wantErr: ErrActionNotAllowed},
		{name: "after payment", given: []domain.Event{link(), funded("b1")}, seller: "s1", wantErr: ErrActionNotAllowed},
		{name: "a funded clone", given: []domain.Event{link(clone), funded("b1")}, seller: "s1", wantErr: ErrActionNotAllowed},
		{name: "after release", given: []domain.Event{link(), funded("b1"), Released{Status: Claimed, At: now}}, seller: "s1",
			wantErr: ErrActionNotAllowed},
		{name: "twice", given: []domain.Event{link(), Deleted{At: t0}}, seller: "s1", wantErr: ErrActionNotAllowed},
		{name: "never created", seller: "s1", wantErr: ErrActionNotAllowed},
		{name: "never created, by the merchant", seller: "", wantErr: ErrActionNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fold(tt.given...)
			got, err := Delete(s, tt.seller, now)
			if refused(t, err, tt.wantErr, "") {
				return
			}
			if got != (Deleted{At: now}) {
				t.Fatalf("got %+v", got)
			}
			after := Apply(s, got)
			if after.Exists() || !after.Deleted || !after.UpdatedAt.Equal(now) {
				t.Fatalf("state after Deleted: %+v", after)
			}
			if err := CheckCheckout(after, "b1"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("checkout of a deleted link: %v", err)
			}
		})
	}
}

func TestSetAdditionalFee(t *testing.T) {
	tests := []struct {
		name       string
		given      []domain.Event
		fee        money.Amount
		refundable *bool
		want       AdditionalFeeSet
		wantErr    error
	}{
		{name: "set, refundable by default", given: []domain.Event{link()}, fee: money.Naira(500),
			want: AdditionalFeeSet{AdditionalFee: money.Naira(500), Refundable: true, At: now}},
		{name: "set not refundable", given: []domain.Event{link()}, fee: money.Naira(500), refundable: ptr(false),
			want: AdditionalFeeSet{AdditionalFee: money.Naira(500), Refundable: false, At: now}},
		{name: "omitted refundable keeps false", given: []domain.Event{link(), feeSet(money.Naira(500), false)}, fee: money.Naira(700),
			want: AdditionalFeeSet{AdditionalFee: money.Naira(700), Refundable: false, At: now}},
		{name: "refundable set back to true", given: []domain.Event{link(), feeSet(money.Naira(500), false)}, fee: money.Naira(500),
			refundable: ptr(true), want: AdditionalFeeSet{AdditionalFee: money.Naira(500), Refundable: true, At: now}},
		{name: "0 removes it", given: []domain.Event{link(), feeSet(money.Naira(500), true)}, fee: 0,
			want: AdditionalFeeSet{AdditionalFee: 0, Refundable: true, At: now}},
		{name: "repeatable", given: []domain.Event{link(), feeSet(money.Naira(500), true), feeSet(money.Naira(900), true), feeSet(0, true)},
			fee: money.Naira(300), want: AdditionalFeeSet{AdditionalFee: money.Naira(300), Refundable: true, At: now}},
		{name: "on the merchant's own sale", given: []domain.Event{link(merchantSale)}, fee: money.Naira(1),
			want: AdditionalFeeSet{AdditionalFee: money.Naira(1), Refundable: true, At: now}},
		{name: "on a multi-unit link with units sold", given: []domain.Event{link(multi(3)), UnitSold{CloneID: "e2", Remaining: 2}},
			fee: money.Naira(100), want: AdditionalFeeSet{AdditionalFee: money.Naira(100), Refundable: true, At: now}},

		{name: "negative", given: []domain.Event{link()}, fee: -money.Naira(1), wantErr: ErrNegativeFee},
		{name: "a negative kobo", given: []domain.Event{link()}, fee: -1, wantErr: ErrNegativeFee},
		{name: "after payment", given: []domain.Event{link(), funded("b1")}, fee: money.Naira(500), wantErr: ErrFeeFrozen},
		{name: "0 after payment", given: []domain.Event{link(), feeSet(money.Naira(500), true), funded("b1")}, fee: 0, wantErr: ErrFeeFrozen},
		{name: "on a funded clone", given: []domain.Event{link(clone), funded("b1")}, fee: money.Naira(500), wantErr: ErrFeeFrozen},
		{name: "after release", given: []domain.Event{link(), funded("b1"), Released{Status: Completed, At: now}}, fee: money.Naira(500),
			wantErr: ErrFeeFrozen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fold(tt.given...)
			got, err := SetAdditionalFee(s, tt.fee, tt.refundable, now)
			if refused(t, err, tt.wantErr, "") {
				return
			}
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			after := Apply(s, got)
			if after.AdditionalFee != tt.want.AdditionalFee || after.AdditionalFeeRefundable != tt.want.Refundable ||
				after.Fee != s.Fee || after.Terms != s.Terms || !after.UpdatedAt.Equal(now) {
				t.Fatalf("state after AdditionalFeeSet: %+v", after)
			}
			// The fee is charged on top: amount, fee and shares are unchanged.
			if after.Due() != s.Due()-s.AdditionalFee+tt.want.AdditionalFee {
				t.Fatalf("Due %s, before %s", after.Due(), s.Due())
			}
		})
	}
}

func TestCheckCheckout(t *testing.T) {
	tests := []struct {
		name    string
		given   []domain.Event
		buyer   string
		wantErr error
	}{
		{name: "an unpaid link", given: []domain.Event{link()}, buyer: "b1"},
		{name: "the merchant's sale: its empty seller id is no customer's", given: []domain.Event{link(merchantSale)}, buyer: "b1"},
		{name: "a multi-unit link with a unit left", given: []domain.Event{link(multi(2)), UnitSold{CloneID: "e2", Remaining: 1}}, buyer: "b1"},

		{name: "never created", buyer: "b1", wantErr: ErrNotFound},
		{name: "deleted", given: []domain.Event{link(), Deleted{At: t0}}, buyer: "b1", wantErr: ErrNotFound},
		{name: "already funded", given: []domain.Event{link(), funded("b2")}, buyer: "b1", wantErr: ErrNotCheckoutable},
		{name: "funded by the same buyer", given: []domain.Event{link(), funded("b1")}, buyer: "b1", wantErr: ErrNotCheckoutable},
		{name: "a funded clone", given: []domain.Event{link(clone), funded("b2")}, buyer: "b1", wantErr: ErrNotCheckoutable},
		{name: "released", given: []domain.Event{link(), funded("b2"), Released{Status: Completed, At: now}}, buyer: "b1",
			wantErr: ErrNotCheckoutable},
		{name: "the seller", given: []domain.Event{link()}, buyer: "s1", wantErr: ErrOwnEscrow},
		{name: "the seller of a multi-unit link", given: []domain.Event{link(multi(3))}, buyer: "s1", wantErr: ErrOwnEscrow},
		{name: "sold out", given: []domain.Event{link(multi(2)), UnitSold{CloneID: "e2", Remaining: 1}, UnitSold{CloneID: "e3", Remaining: 0}},
			buyer: "b1", wantErr: ErrSoldOut},
		{name: "edited down to one then sold", given: []domain.Event{link(multi(3)),
			Edited{Terms: link().Terms, Fee: money.Naira(250), Quantity: 1}, UnitSold{CloneID: "e2", Remaining: 0}},
			buyer: "b1", wantErr: ErrSoldOut},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fold(tt.given...)
			err := CheckCheckout(s, tt.buyer)
			if refused(t, err, tt.wantErr, "") {
				// Buy refuses the same way and decides nothing.
				p, berr := Buy(s, tt.buyer, "p1", "e9", "PT_E9", now)
				if !errors.Is(berr, tt.wantErr) || !reflect.DeepEqual(p, Purchase{}) {
					t.Fatalf("Buy = %+v, %v; want %v", p, berr, tt.wantErr)
				}
				return
			}
			if _, err := Buy(s, tt.buyer, "p1", "e9", "PT_E9", now); err != nil {
				t.Fatalf("Buy: %v", err)
			}
		})
	}
}

func TestBuySingleUnit(t *testing.T) {
	tests := []struct {
		name  string
		given []domain.Event
		due   money.Amount
	}{
		{name: "buyer pays the fee", given: []domain.Event{link()}, due: money.Naira(10250)},
		{name: "seller pays the fee", given: []domain.Event{link(whoPays(Seller))}, due: money.Naira(10000)},
		{name: "both pay", given: []domain.Event{link(whoPays(Both))}, due: money.Naira(10125)},
		{name: "both pay an odd fee", given: []domain.Event{link(whoPays(Both), priced(money.Naira(1010), money.Naira(25)))},
			due: money.Naira(1010) + 1250},
		{name: "with an additional fee", given: []domain.Event{link(), feeSet(money.Naira(500), false)}, due: money.Naira(10750)},
		{name: "seller pays, additional fee", given: []domain.Event{link(whoPays(Seller)), feeSet(money.Naira(500), true)},
			due: money.Naira(10500)},
		{name: "additional fee removed", given: []domain.Event{link(), feeSet(money.Naira(500), true), feeSet(0, true)},
			due: money.Naira(10250)},
		{name: "merchant's own sale", given: []domain.Event{link(merchantSale), feeSet(money.Naira(300), true)},
			due: money.Naira(10550)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fold(tt.given...)
			if s.Due() != tt.due {
				t.Fatalf("Due = %s, want %s", s.Due(), tt.due)
			}
			got, err := Buy(s, "b1", "p1", "e9", "PT_E9", now)
			if err != nil {
				t.Fatal(err)
			}
			f := Funded{BuyerID: "b1", PaymentID: "p1", Paid: tt.due, RemindAt: now.Add(6 * 24 * time.Hour), At: now}
			if got.Clone != nil || got.Events != nil || !reflect.DeepEqual(got.Link, []domain.Event{f}) {
				t.Fatalf("a single link is funded itself: %+v", got)
			}
			want := s
			want.BuyerID, want.PaymentID, want.PaidAt, want.UpdatedAt = "b1", "p1", now, now
			want.RemindAt = f.RemindAt
			want.Status, want.Logs = Ongoing, []string{"PENDING", "ONGOING"}
			if got.Funded.Status.Phase() != Opened {
				t.Fatalf("funded state is %s, want OPENED", got.Funded.Status.Phase())
			}
			if !reflect.DeepEqual(got.Funded, want) {
				t.Fatalf("funded state\n got  %+v\n want %+v", got.Funded, want)
			}
			if !reflect.DeepEqual(got.Funded, Apply(s, f)) {
				t.Fatal("Purchase.Funded is not the link with its events applied")
			}
		})
	}
}

func TestBuyMultiUnit(t *testing.T) {
	l := link(multi(2), whoPays(Both), func(c *Created) {
		c.Terms.Description, c.Terms.CategoryID, c.ImageURLs = "new", "cat1", images(0, 3)
	})
	s := fold(l, feeSet(money.Naira(400), false))
	got, err := Buy(s, "b1", "p1", "e2", "PT_E2", now)
	if err != nil {
		t.Fatal(err)
	}
	wantClone := Created{ID: "e2", PaymentToken: "PT_E2", MerchantID: "m1", Environment: domain.Test, SellerID: "s1",
		Terms: l.Terms, FeeTerms: fees, Fee: money.Naira(250), AdditionalFee: money.Naira(400), AdditionalFeeRefundable: false,
		ImageURLs: images(0, 3), TotalQuantity: 1, ParentID: "e1", Channel: "api", SettlementType: StandardSettlement, At: now}
	due := money.Naira(10000 + 125 + 400)
	wantFunded := Funded{BuyerID: "b1", PaymentID: "p1", Paid: due, RemindAt: now.Add(6 * 24 * time.Hour), At: now}
	if got.Clone == nil || !reflect.DeepEqual(*got.Clone, wantClone) {
		t.Fatalf("clone\n got  %+v\n want %+v", got.Clone, wantClone)
	}
	if !reflect.DeepEqual(got.Events, []domain.Event{wantClone, wantFunded}) {
		t.Fatalf("clone events %+v", got.Events)
	}
	if !reflect.DeepEqual(got.Link, []domain.Event{UnitSold{CloneID: "e2", Remaining: 1, At: now}}) {
		t.Fatalf("link events %+v", got.Link)
	}
	c := got.Funded
	if !reflect.DeepEqual(c, fold(wantClone, wantFunded)) {
		t.Fatal("Purchase.Funded is not the clone with its events applied")
	}
	if c.ID != "e2" || c.ParentID != "e1" || c.MultiUnit || c.TotalQuantity != 1 || c.BuyerID != "b1" ||
		c.Status != Ongoing || c.Status.Phase() != Opened || c.Due() != due || c.Held() != money.Naira(10125) ||
		!reflect.DeepEqual(c.Logs, []string{"PENDING", "ONGOING"}) {
		t.Fatalf("funded clone %+v", c)
	}

	// The link stays on sale with one unit fewer, and sells out at 0.
	s = fold(append([]domain.Event{l, feeSet(money.Naira(400), false)}, got.Link...)...)
	if s.Status != Pending || s.Status.Phase() != AwaitingPayment || s.TotalQuantity != 1 || !s.MultiUnit || s.BuyerID != "" {
		t.Fatalf("link after one sale: %+v", s)
	}
	last, err := Buy(s, "b2", "p2", "e3", "PT_E3", now)
	if err != nil {
		t.Fatal(err)
	}
	if last.Clone == nil || last.Clone.ID != "e3" || last.Funded.BuyerID != "b2" ||
		!reflect.DeepEqual(last.Link, []domain.Event{UnitSold{CloneID: "e3", Remaining: 0, At: now}}) {
		t.Fatalf("last unit: %+v", last)
	}
	s = Apply(s, last.Link[0])
	if _, err := Buy(s, "b3", "p3", "e4", "PT_E4", now); !errors.Is(err, ErrSoldOut) {
		t.Fatalf("sold out: %v", err)
	}
}

func TestStatusTerminal(t *testing.T) {
	for st, want := range map[Status]bool{
		Pending: false, Ongoing: false, Disputed: false, Investigating: false,
		Completed: true, Claimed: true, Refunded: true, Split: true,
		"": false, "UNKNOWN": false,
	} {
		if st.Terminal() != want {
			t.Errorf("%q.Terminal() = %v, want %v", st, !want, want)
		}
	}
}

// Apply must not change a state it was given: the engine's cache shares them.
func TestApplyIsCopyOnWrite(t *testing.T) {
	base := fold(link(func(c *Created) { c.ImageURLs = images(0, 2) }))
	// Spare capacity, which an in-place append would use.
	base.ImageURLs = append(make([]string, 0, 10), base.ImageURLs...)
	base.Logs = append(make([]string, 0, 10), base.Logs...)
	imgs, logs := base.ImageURLs[:cap(base.ImageURLs)], base.Logs[:cap(base.Logs)]
	snapshot := func() (State, []string, []string) {
		return base, append([]string{}, imgs...), append([]string{}, logs...)
	}
	wantState, wantImgs, wantLogs := snapshot()

	events := []domain.Event{
		Edited{Terms: base.Terms, Fee: base.Fee, AddImages: images(2, 3), Quantity: 1, At: now},
		feeSet(money.Naira(100), false),
		UnitSold{CloneID: "e2", Remaining: 0, At: now},
		funded("b1"),
		Released{Status: Completed, At: now},
		Deleted{At: now},
	}
	for _, ev := range events {
		_ = Apply(base, ev)
	}
	// And a chain: each step's result applied on.
	s := base
	for _, ev := range events[:2] {
		s = Apply(s, ev)
	}
	s = Apply(Apply(s, funded("b1")), Released{Status: Claimed, At: now})
	gotState, gotImgs, gotLogs := snapshot()
	if !reflect.DeepEqual(gotState, wantState) || !reflect.DeepEqual(gotImgs, wantImgs) || !reflect.DeepEqual(gotLogs, wantLogs) {
		t.Fatalf("Apply changed its input:\n%+v\n%q\n%q", gotState, gotImgs, gotLogs)
	}
	if !reflect.DeepEqual(s.Logs, []string{"PENDING", "ONGOING", "CLAIMED"}) || len(s.ImageURLs) != 5 {
		t.Fatalf("chained state %+v", s)
	}

	// The Created event's images are copied too.
	c := link()
	st := Apply(State{}, c)
	st.ImageURLs[0] = "changed"
	if c.ImageURLs[0] == "changed" {
		t.Fatal("the state shares the Created event's images")
	}
}

func TestOwned(t *testing.T) {
	live := func(c *Created) { c.Environment = domain.Live }
	for _, tt := range []struct {
		name    string
		given   []domain.Event
		wantErr error
	}{
		{"own", []domain.Event{link()}, nil},
		{"never created", nil, ErrNotFound},
		{"deleted", []domain.Event{link(), Deleted{At: t0}}, ErrNotFound},
		{"other environment", []domain.Event{link(live)}, ErrNotFound},
		{"other merchant", []domain.Event{link(func(c *Created) { c.MerchantID = "m2" })}, ErrOtherMerchant},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := Owned(fold(tt.given...), "m1", domain.Test); err != tt.wantErr {
				t.Fatalf("Owned() = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

// The state (AWAITING_PAYMENT, OPENED, CLOSED) follows from the status.
func TestStatusPhase(t *testing.T) {
	for status, want := range map[Status]Phase{Pending: AwaitingPayment, Ongoing: Opened, Disputed: Opened,
		Investigating: Opened, Completed: Closed, Claimed: Closed, Refunded: Closed, Split: Closed} {
		if got := status.Phase(); got != want {
			t.Errorf("%s.Phase() = %s, want %s", status, got, want)
		}
	}
}
