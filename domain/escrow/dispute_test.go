package escrow

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
)

func entry(typ, user string) DisputeEntry {
	return DisputeEntry{UserID: user, Name: "N " + user, Message: "msg " + user, Type: typ, CreatedAt: now}
}

func opened(by string) DisputeSubmitted {
	return DisputeSubmitted{Entry: entry(EntryBuyer, by), Status: Disputed, At: now}
}

func answered(by string) DisputeSubmitted {
	return DisputeSubmitted{Entry: entry(EntrySeller, by), Status: Investigating, At: now}
}

func TestSubmitDispute(t *testing.T) {
	vault := link(func(c *Created) { c.SettlementType = VaultSettlement })
	tests := []struct {
		name    string
		given   []domain.Event
		who     string
		message string
		want    *DisputeSubmitted
		wantErr error
		wantMsg string
	}{
		{name: "the buyer opens", given: funds(0), who: "b1", want: ptr(opened("b1"))},
		{name: "the seller answers", given: append(funds(0), opened("b1")), who: "s1", want: ptr(answered("s1"))},
		{name: "the seller first", given: funds(0), who: "s1", wantErr: ErrBuyerFirst},
		{name: "the buyer twice", given: append(funds(0), opened("b1")), who: "b1", wantErr: ErrBuyerAlreadyDisputed},
		{name: "the buyer after the seller answered", given: append(funds(0), opened("b1"), answered("s1")), who: "b1",
			wantErr: ErrBuyerAlreadyDisputed},
		{name: "the seller twice", given: append(funds(0), opened("b1"), answered("s1")), who: "s1", wantErr: ErrSellerAlreadyDisputed},
		{name: "someone else", given: funds(0), who: "x9", wantErr: ErrAccessDenied},
		{name: "no customer (the merchant)", given: funds(0), who: "", wantErr: ErrAccessDenied},
		{name: "unpaid: the seller", given: []domain.Event{link()}, who: "s1", wantErr: ErrActionNotAllowed},
		{name: "unpaid: anyone else", given: []domain.Event{link()}, who: "b1", wantErr: ErrAccessDenied},
		{name: "completed", given: append(funds(0), Released{Status: Completed, At: now}), who: "b1", wantErr: ErrActionNotAllowed},
		{name: "a vault", given: []domain.Event{vault}, who: "b1", wantErr: ErrVaultNotDisputable},
		{name: "never created", who: "b1", wantErr: ErrNotFound},
		{name: "deleted", given: []domain.Event{link(), Deleted{At: now}}, who: "s1", wantErr: ErrNotFound},
		{name: "no message", given: funds(0), who: "b1", message: " ", wantMsg: "message is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fold(tt.given...)
			msg := "msg " + tt.who
			if tt.message != "" {
				msg = tt.message
			}
			got, err := SubmitDispute(s, Submission{CustomerID: tt.who, Name: "N " + tt.who, Message: msg}, now)
			if refused(t, err, tt.wantErr, tt.wantMsg) {
				return
			}
			if !reflect.DeepEqual(got, *tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, *tt.want)
			}
			after := Apply(s, got)
			if after.Status != got.Status || after.Status.Phase() != Opened || after.Disputes[len(after.Disputes)-1] != got.Entry ||
				after.Logs[len(after.Logs)-1] != string(got.Status) {
				t.Fatalf("state after the entry: %+v", after)
			}
		})
	}
	// Refusals come in the spec's order: a party, then the state, then repeats.
	if _, err := SubmitDispute(fold(append(funds(0), opened("b1"))...), Submission{CustomerID: "x9", Message: "m"}, now); !errors.Is(err, ErrAccessDenied) {
		t.Fatalf("a stranger on a disputed escrow: %v", err)
	}
}

// expectation computes, independently of Settlement, what each account
// gains or loses when a funded escrow is resolved.
type expectation struct {
	amount, fee, additional money.Amount
	who                     WhoPays
	commissionBps           int64
	refundable              bool
}

func (x expectation) deltas(status Status, sellerAmount, buyerAmount money.Amount, merchantSale bool) map[ledger.Account]money.Amount {
	var buyerShare money.Amount
	switch x.who {
	case Buyer:
		buyerShare = x.fee
	case Both:
		buyerShare = (x.fee + 1) / 2 // half, rounded half-up to the kobo
	}
	sellerShare := x.fee - buyerShare
	commission := x.fee * money.Amount(x.commissionBps) / 10_000
	pool := x.amount - sellerShare
	seller := ledger.CustomerMain("s1")
	if merchantSale {
		seller = ledger.MerchantMain("m1")
	}
	d := map[ledger.Account]money.Amount{}
	add := func(a ledger.Account, v money.Amount) { d[a] += v }
	add(ledger.CustomerEscrow("b1"), -(x.amount + buyerShare))
	add(ledger.MerchantMain("m1"), commission)
	add(ledger.PlatformRevenue("m1"), x.fee-commission)
	add(ledger.MerchantEscrow("m1"), -x.additional)
	toBuyer := status != Completed && x.refundable
	if toBuyer {
		add(ledger.CustomerMain("b1"), x.additional)
	} else {
		add(ledger.MerchantMain("m1"), x.additional)
	}
	switch status {
	case Completed:
		add(seller, pool)
	case Refunded:
		add(ledger.CustomerMain("b1"), pool)
	case Split:
		add(seller, sellerAmount)
		add(ledger.CustomerMain("b1"), buyerAmount)
	}
	for a, v := range d {
		if v == 0 {
			delete(d, a)
		}
	}
	return d
}

// TestResolveSettlement resolves escrows of every fee arrangement, with and
// without an additional fee (refundable or not, overridden or not), and
// compares the money with the independent computation above; every credit
// is explained by a record of the party it credits.
func TestResolveSettlement(t *testing.T) {
	type variant struct {
		who        WhoPays
		amount     money.Amount
		fee        money.Amount
		additional money.Amount
		escrowRef  bool  // the escrow's setting
		requestRef *bool // the resolution's choice
		sale       bool  // the merchant sells as itself
	}
	var variants []variant
	for _, who := range []WhoPays{Buyer, Seller, Both} {
		for _, add := range []money.Amount{0, money.Naira(500)} {
			for _, escrowRef := range []bool{true, false} {
				for _, req := range []*bool{nil, ptr(true), ptr(false)} {
					variants = append(variants, variant{who: who, amount: money.Naira(10000), fee: money.Naira(250),
						additional: add, escrowRef: escrowRef, requestRef: req})
				}
			}
		}
		// An odd fee: "both" halves round, and a merchant sale.
		variants = append(variants, variant{who: who, amount: money.Naira(1010), fee: money.Naira(25) + 1, additional: 333},
			variant{who: who, amount: money.Naira(5000), fee: money.Naira(125), sale: true, additional: 7})
	}
	for _, v := range variants {
		for _, status := range []Status{Completed, Refunded, Split} {
			name := fmt.Sprintf("%s/%s/%s+%s/escrow-refundable=%v/request=%v/sale=%v", status, v.who, v.amount, v.additional,
				v.escrowRef, v.requestRef, v.sale)
			t.Run(name, func(t *testing.T) {
				opts := []func(*Created){whoPays(v.who), priced(v.amount, v.fee), func(c *Created) { c.FeeTerms.CommissionBps = 3333 }}
				if v.sale {
					opts = append(opts, merchantSale)
				}
				evs := []domain.Event{link(opts...), feeSet(v.additional, v.escrowRef), funded("b1"), opened("b1")}
				s := fold(evs...)
				refundable := v.escrowRef
				if v.requestRef != nil {
					refundable = *v.requestRef
				}
				x := expectation{amount: v.amount, fee: v.fee, additional: v.additional, who: v.who, commissionBps: 3333, refundable: refundable}
				r := Resolution{Status: string(status), AdditionalFeeRefundable: v.requestRef, MerchantID: "m1"}
				var sa, ba money.Amount
				if status == Split {
					pool := s.HeldPool()
					sa, ba = pool*2/3+1, pool-(pool*2/3+1) // uneven, to the kobo
					r.SellerAmount, r.BuyerAmount = &sa, &ba
				}
				got, err := Resolve(s, r, now)
				if err != nil {
					t.Fatal(err)
				}
				checkBalanced(t, got.Movement)
				want := x.deltas(status, sa, ba, v.sale)
				if d := got.Movement.Deltas(); !reflect.DeepEqual(d, want) {
					t.Fatalf("deltas\n got  %v\n want %v", d, want)
				}
				// Each credited party's records explain its main balance.
				credits := map[ledger.Account]money.Amount{}
				for _, rec := range got.Records {
					if rec.CreditType != ledger.Credit || rec.Status != ledger.Success {
						t.Fatalf("record %+v", rec)
					}
					credits[s.mainOf(rec.CustomerID)] += rec.Amount
				}
				for a, d := range want {
					if a.Bucket == ledger.Main && credits[a] != d {
						t.Fatalf("%s gains %s but its records say %s (%+v)", a, d, credits[a], got.Records)
					}
				}
				after := Apply(s, got)
				if after.Status != status || after.Status.Phase() != Closed || after.AdditionalFeeRefundable != refundable {
					t.Fatalf("state after: %+v", after)
				}
				if status == Split && (after.Split == nil || after.Split.Pool != s.HeldPool() || after.Split.SellerAmount != sa ||
					after.Split.BuyerAmount != ba || !after.Split.ResolvedAt.Equal(now)) {
					t.Fatalf("split after: %+v", after.Split)
				}
				if status != Split && after.Split != nil {
					t.Fatalf("split on %s", status)
				}
				if (status == Refunded) != (after.RefundedBy == "m1") {
					t.Fatalf("refundedBy %q on %s", after.RefundedBy, status)
				}
			})
		}
	}
}

func TestResolveRefusals(t *testing.T) {
	disputed := fold(append(funds(money.Naira(500), whoPays(Both)), opened("b1"))...) // pool 10,000 - 125
	investigating := Apply(disputed, answered("s1"))
	amt := func(n int64) *money.Amount { return ptr(money.Amount(n)) }
	tests := []struct {
		name    string
		s       State
		r       Resolution
		wantErr error
		wantMsg string
	}{
		{name: "from DISPUTED", s: disputed, r: Resolution{Status: "COMPLETED"}},
		{name: "from INVESTIGATING", s: investigating, r: Resolution{Status: "REFUNDED"}},
		{name: "lower case status", s: disputed, r: Resolution{Status: "split", SellerAmount: amt(987500), BuyerAmount: amt(0)}},
		{name: "split to the kobo", s: disputed, r: Resolution{Status: "SPLIT", SellerAmount: amt(487550), BuyerAmount: amt(499950)}},
		{name: "split sum short", s: disputed, r: Resolution{Status: "SPLIT", SellerAmount: amt(500000), BuyerAmount: amt(487499)},
			wantMsg: "sellerAmount and buyerAmount must add up to the held amount of 9875"},
		{name: "split sum over", s: disputed, r: Resolution{Status: "SPLIT", SellerAmount: amt(1000000), BuyerAmount: amt(50)},
			wantMsg: "sellerAmount and buyerAmount must add up to the held amount of 9875"},
		{name: "split without amounts", s: disputed, r: Resolution{Status: "SPLIT", SellerAmount: amt(1)},
			wantMsg: "sellerAmount and buyerAmount are required with SPLIT"},
		{name: "negative part", s: disputed, r: Resolution{Status: "SPLIT", SellerAmount: amt(987600), BuyerAmount: amt(-100)},
			wantMsg: "sellerAmount and buyerAmount must not be negative"},
		{name: "amounts with COMPLETED", s: disputed, r: Resolution{Status: "COMPLETED", SellerAmount: amt(1)},
			wantMsg: "sellerAmount and buyerAmount are only allowed with SPLIT"},
		{name: "amounts with REFUNDED", s: disputed, r: Resolution{Status: "REFUNDED", BuyerAmount: amt(1)},
			wantMsg: "sellerAmount and buyerAmount are only allowed with SPLIT"},
		{name: "unknown status", s: disputed, r: Resolution{Status: "CLAIMED"}, wantMsg: "status must be one of COMPLETED, REFUNDED, SPLIT"},
		{name: "not disputed", s: fold(funds(0)...), r: Resolution{Status: "COMPLETED"}, wantErr: ErrNotUnderDispute},
		{name: "resolved already", s: Apply(disputed, DisputeResolved{Status: Completed, At: now}), r: Resolution{Status: "REFUNDED"},
			wantErr: ErrNotUnderDispute},
		{name: "unpaid", s: fold(link()), r: Resolution{Status: "COMPLETED"}, wantErr: ErrNotUnderDispute},
		{name: "a vault", s: fold(link(func(c *Created) { c.SettlementType = VaultSettlement })), r: Resolution{Status: "COMPLETED"},
			wantErr: ErrNotUnderDispute},
		{name: "never created", r: Resolution{Status: "COMPLETED"}, wantErr: ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Resolve(tt.s, tt.r, now)
			if refused(t, err, tt.wantErr, tt.wantMsg) {
				return
			}
			checkBalanced(t, got.Movement)
		})
	}
	// The pool message writes kobo like a response amount.
	odd := fold(append(funds(0, whoPays(Both), priced(money.Naira(1011), money.Naira(25)+1)), opened("b1"))...)
	_, err := Resolve(odd, Resolution{Status: "SPLIT", SellerAmount: amt(1), BuyerAmount: amt(1)}, now)
	if want := "sellerAmount and buyerAmount must add up to the held amount of 998.5"; domain.ErrorMessage(err) != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

// The merchant's entry is appended when it wrote or attached something.
func TestResolveAdminEntry(t *testing.T) {
	s := fold(append(funds(0), opened("b1"))...)
	got, err := Resolve(s, Resolution{Status: "REFUNDED", MerchantID: "m1", MerchantName: "Shop", Message: "refund it",
		ProofURL: "http://files/p.pdf"}, now)
	if err != nil {
		t.Fatal(err)
	}
	want := DisputeEntry{UserID: "m1", Name: "Shop", Message: "refund it", ProofURL: "http://files/p.pdf", Type: EntryAdmin, CreatedAt: now}
	if got.Entry == nil || *got.Entry != want {
		t.Fatalf("entry %+v", got.Entry)
	}
	if after := Apply(s, got); len(after.Disputes) != 2 || after.Disputes[1] != want {
		t.Fatalf("disputes after %+v", after.Disputes)
	}
	bare, err := Resolve(s, Resolution{Status: "REFUNDED", MerchantID: "m1"}, now)
	if err != nil || bare.Entry != nil {
		t.Fatalf("entry without text or file: %+v, %v", bare.Entry, err)
	}
}

// A settlement that does not add up is refused before it moves anything.
func TestSettlementMustAddUp(t *testing.T) {
	s := fold(funds(0)...)
	st := s.Completion(Completed)
	st.Payouts[0].Amount++
	if _, _, err := st.Entry(s, now); !errors.Is(err, ledger.ErrUnbalanced) {
		t.Fatalf("unbalanced settlement: %v", err)
	}
	st = s.Completion(Completed)
	st.Commission = st.Fee + 1
	if _, _, err := st.Entry(s, now); !errors.Is(err, ledger.ErrUnbalanced) {
		t.Fatalf("commission above the fee: %v", err)
	}
}
