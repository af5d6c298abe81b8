package escrow

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ids"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
)

// drafts are milestones of 10,000 naira in all: 2,000 to beneficiary c9,
// then 3,000 and 5,000 to the seller.
func drafts() []MilestoneDraft {
	due := now.Add(48 * time.Hour)
	return []MilestoneDraft{
		{ID: "m1", Title: "Design", Amount: money.Naira(2000), CustomerID: "c9", DueDate: &due},
		{ID: "m2", Title: "Build", Description: "the thing", Amount: money.Naira(3000)},
		{ID: "m3", Title: "Ship", Amount: money.Naira(5000)},
	}
}

func milestoneDraft() Draft {
	return Draft{Amount: money.Naira(10000), Purpose: "Website", WhoPays: "buyer"}
}

// milestoneEscrow is a paid milestone escrow of drafts(): the buyer holds
// 10,250 (the fee of 250 included).
func milestoneEscrow(t *testing.T) State {
	t.Helper()
	c, err := CreateMilestones("e1", "PT_E1", "m1", domain.Test, "s1", fees, milestoneDraft(), drafts(), t0)
	if err != nil {
		t.Fatal(err)
	}
	return fold(c, funded("b1"))
}

func TestCreateMilestones(t *testing.T) {
	past := t0.Add(-time.Hour)
	with := func(f func(ds []MilestoneDraft) []MilestoneDraft) []MilestoneDraft { return f(drafts()) }
	many := make([]MilestoneDraft, 51)
	for i := range many {
		many[i] = MilestoneDraft{ID: "x", Title: "t", Amount: money.Naira(100)}
	}
	tests := []struct {
		name    string
		draft   func(*Draft)
		ms      []MilestoneDraft
		wantErr error
		wantMsg string
	}{
		{name: "valid", ms: drafts()},
		{name: "whoPays defaults to buyer", draft: func(d *Draft) { d.WhoPays = "" }, ms: drafts()},
		{name: "whoPays seller", draft: func(d *Draft) { d.WhoPays = "seller" }, ms: drafts(), wantErr: ErrMilestoneWhoPays},
		{name: "whoPays both", draft: func(d *Draft) { d.WhoPays = "both" }, ms: drafts(), wantErr: ErrMilestoneWhoPays},
		{name: "one milestone", ms: drafts()[:1], wantErr: ErrTooFewMilestones},
		{name: "none", ms: nil, wantErr: ErrTooFewMilestones},
		{name: "51 milestones", draft: func(d *Draft) { d.Amount = money.Naira(5100) }, ms: many, wantErr: ErrTooManyMilestones},
		{name: "sum short", ms: drafts()[:2], wantErr: ErrMilestoneSum},
		{name: "sum over", ms: with(func(ds []MilestoneDraft) []MilestoneDraft { ds[2].Amount++; return ds }), wantMsg: "milestones[2].amount must be a positive integer"},
		{name: "zero amount", ms: with(func(ds []MilestoneDraft) []MilestoneDraft {
			ds[0].Amount = 0
			ds[1].Amount += money.Naira(2000)
			return ds
		}),
			wantMsg: "milestones[0].amount must be a positive integer"},
		{name: "past due date", ms: with(func(ds []MilestoneDraft) []MilestoneDraft { ds[1].DueDate = &past; return ds }), wantErr: ErrDueDatePast},
		{name: "due now", ms: with(func(ds []MilestoneDraft) []MilestoneDraft { t := t0; ds[1].DueDate = &t; return ds }), wantErr: ErrDueDatePast},
		{name: "no title", ms: with(func(ds []MilestoneDraft) []MilestoneDraft { ds[0].Title = " "; return ds }), wantMsg: "milestones[0].title is required"},
		{name: "several units", draft: func(d *Draft) { d.TotalQuantity = ptr(2) }, ms: drafts(),
			wantMsg: "totalQuantity must be 1 for a milestone escrow"},
		{name: "escrow rules still hold", draft: func(d *Draft) { d.Amount = money.Naira(999) }, ms: drafts(),
			wantMsg: "amount must be an integer of at least 1000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := milestoneDraft()
			if tt.draft != nil {
				tt.draft(&d)
			}
			got, err := CreateMilestones("e1", "PT_E1", "m1", domain.Test, "s1", fees, d, tt.ms, t0)
			if refused(t, err, tt.wantErr, tt.wantMsg) {
				return
			}
			s := fold(got)
			if s.Type() != MilestoneSettlement || s.Terms.WhoPays != Buyer || s.Fee != money.Naira(250) || len(s.Milestones) != 3 ||
				s.Milestones[0].CustomerID != "c9" || s.Milestones[1].Description != "the thing" || s.HeldPool() != money.Naira(10000) {
				t.Fatalf("created %+v", s)
			}
			for _, m := range s.Milestones {
				if m.Status != MilestonePending || m.ReleasedAt != nil {
					t.Fatalf("milestone %+v", m)
				}
			}
		})
	}
}

// TestReleaseMilestones releases every milestone in order and checks each
// movement against the fee rule: the milestone's amount from the buyer's
// escrow balance to its beneficiary; the last also collects the fee.
func TestReleaseMilestones(t *testing.T) {
	s := milestoneEscrow(t)
	beneficiary := map[string]ledger.Account{"m1": ledger.CustomerMain("c9"), "m2": sellerMain, "m3": sellerMain}
	for i, id := range []string{"m1", "m2", "m3"} {
		if i < 2 {
			if _, err := ReleaseMilestone(s, "b1", "m3", now); !errors.Is(err, ErrMilestoneOrder) {
				t.Fatalf("out of order: %v", err)
			}
		}
		got, err := ReleaseMilestone(s, "b1", id, now)
		if err != nil {
			t.Fatal(err)
		}
		checkBalanced(t, got.Movement)
		m := s.Milestones[i]
		want := map[ledger.Account]money.Amount{buyerEscrow: -m.Amount, beneficiary[id]: m.Amount}
		if i == 2 {
			want[buyerEscrow] -= money.Naira(250)
			want[merchantMain], want[platform] = money.Naira(125), money.Naira(125)
		}
		if d := got.Movement.Deltas(); !reflect.DeepEqual(d, want) {
			t.Fatalf("%s deltas %v, want %v", id, d, want)
		}
		rec := got.Records[0]
		if rec.ID != ids.Derived(now, "e1/release-"+id) || rec.Type != ledger.EscrowRelease || rec.Amount != m.Amount ||
			s.mainOf(rec.CustomerID) != beneficiary[id] {
			t.Fatalf("%s record %+v", id, rec)
		}
		s = Apply(s, got)
		if s.Milestones[i].Status != MilestoneReleased || s.Milestones[i].ReleasedAt == nil || !s.Milestones[i].ReleasedAt.Equal(now) {
			t.Fatalf("%s after release %+v", id, s.Milestones[i])
		}
		if _, err := ReleaseMilestone(s, "b1", id, now); !errors.Is(err, ErrMilestoneReleased) && i < 2 {
			t.Fatalf("released twice: %v", err)
		}
		wantStatus := Ongoing
		if i == 2 {
			wantStatus = Completed
			if len(got.Records) != 2 || got.Records[1].Type != ledger.Commission || got.Status != Completed {
				t.Fatalf("last release %+v", got)
			}
		}
		if s.Status != wantStatus {
			t.Fatalf("after %s: status %s", id, s.Status)
		}
	}
	if s.Status.Phase() != Closed || s.HeldPool() != 0 {
		t.Fatalf("completed %+v", s)
	}
	if _, err := SubmitDispute(s, Submission{CustomerID: "b1", Message: "m"}, now); !errors.Is(err, ErrAllMilestonesReleased) {
		t.Fatalf("dispute after every release: %v", err)
	}
}

func TestReleaseMilestoneRefusals(t *testing.T) {
	paid := milestoneEscrow(t)
	unpaid := fold(func() domain.Event {
		c, _ := CreateMilestones("e1", "PT_E1", "m1", domain.Test, "s1", fees, milestoneDraft(), drafts(), t0)
		return c
	}())
	disputed := Apply(paid, opened("b1"))
	tests := []struct {
		name      string
		s         State
		buyer, id string
		wantErr   error
	}{
		{name: "the seller", s: paid, buyer: "s1", id: "m1", wantErr: ErrActionNotAllowed},
		{name: "unpaid", s: unpaid, buyer: "b1", id: "m1", wantErr: ErrActionNotAllowed},
		{name: "no such milestone", s: paid, buyer: "b1", id: "m9", wantErr: ErrMilestoneNotFound},
		{name: "out of order", s: paid, buyer: "b1", id: "m2", wantErr: ErrMilestoneOrder},
		{name: "under dispute", s: disputed, buyer: "b1", id: "m1", wantErr: ErrUnderDispute},
		{name: "a standard escrow", s: fold(funds(0)...), buyer: "b1", id: "m1", wantErr: ErrActionNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReleaseMilestone(tt.s, tt.buyer, tt.id, now)
			refused(t, err, tt.wantErr, "")
		})
	}
	// A milestone escrow is confirmed milestone by milestone, never whole.
	if _, err := Confirm(paid, "b1", now); !errors.Is(err, ErrActionNotAllowed) {
		t.Fatalf("standard confirm of a milestone escrow: %v", err)
	}
	if _, err := Claim(paid, "s1", now.Add(30*24*time.Hour)); !errors.Is(err, ErrActionNotAllowed) {
		t.Fatalf("claim of a milestone escrow: %v", err)
	}
	if _, err := SetAdditionalFee(unpaid, 100, nil, now); !errors.Is(err, ErrFeeStandardOnly) {
		t.Fatalf("additional fee on a milestone escrow: %v", err)
	}
}

// TestMilestoneDisputeOutcomes: a ruling settles every milestone still
// held, at once, after the first was released.
func TestMilestoneDisputeOutcomes(t *testing.T) {
	base := milestoneEscrow(t)
	first, err := ReleaseMilestone(base, "b1", "m1", now)
	if err != nil {
		t.Fatal(err)
	}
	base = Apply(Apply(base, first), opened("b1"))
	if base.HeldPool() != money.Naira(8000) {
		t.Fatalf("held pool %s", base.HeldPool())
	}
	fee := map[ledger.Account]money.Amount{buyerEscrow: -money.Naira(8250), merchantMain: money.Naira(125), platform: money.Naira(125)}
	for _, tt := range []struct {
		r         Resolution
		credits   map[ledger.Account]money.Amount
		milestone MilestoneStatus
	}{
		{Resolution{Status: "COMPLETED"}, map[ledger.Account]money.Amount{sellerMain: money.Naira(8000)}, MilestoneReleased},
		{Resolution{Status: "REFUNDED"}, map[ledger.Account]money.Amount{buyerMain: money.Naira(8000)}, MilestoneRefunded},
		{Resolution{Status: "SPLIT", SellerAmount: ptr(money.Naira(1000) + 1), BuyerAmount: ptr(money.Naira(7000) - 1)},
			map[ledger.Account]money.Amount{sellerMain: money.Naira(1000) + 1, buyerMain: money.Naira(7000) - 1}, MilestoneSplit},
	} {
		t.Run(tt.r.Status, func(t *testing.T) {
			got, err := Resolve(base, tt.r, now)
			if err != nil {
				t.Fatal(err)
			}
			want := map[ledger.Account]money.Amount{}
			for a, v := range fee {
				want[a] = v
			}
			for a, v := range tt.credits {
				want[a] += v
			}
			if d := got.Movement.Deltas(); !reflect.DeepEqual(d, want) {
				t.Fatalf("deltas %v, want %v", d, want)
			}
			after := Apply(base, got)
			if after.Milestones[0].Status != MilestoneReleased || after.Milestones[1].Status != tt.milestone ||
				after.Milestones[2].Status != tt.milestone {
				t.Fatalf("milestones after %+v", after.Milestones)
			}
		})
	}
	if _, err := Resolve(base, Resolution{Status: "SPLIT", SellerAmount: ptr(money.Naira(5000)), BuyerAmount: ptr(money.Naira(5000))}, now); domain.ErrorMessage(err) != "sellerAmount and buyerAmount must add up to the held amount of 8000" {
		t.Fatalf("split of the whole amount: %v", err)
	}
}

func TestEditAndConvertMilestones(t *testing.T) {
	c, err := CreateMilestones("e1", "PT_E1", "m1", domain.Test, "s1", fees, milestoneDraft(), drafts(), t0)
	if err != nil {
		t.Fatal(err)
	}
	ms := fold(c)
	newSet := []MilestoneDraft{{ID: "n1", Title: "One", Amount: money.Naira(6000)}, {ID: "n2", Title: "Two", Amount: money.Naira(6000)}}
	got, err := EditMilestones(ms, "s1", Patch{Amount: ptr(money.Naira(12000))}, newSet, now)
	if err != nil {
		t.Fatal(err)
	}
	if after := Apply(ms, got); after.Fee != money.Naira(300) || after.Terms.Amount != money.Naira(12000) || len(after.Milestones) != 2 ||
		after.Milestones[0].ID != "n1" || after.Type() != MilestoneSettlement {
		t.Fatalf("edited %+v", after)
	}
	for _, tt := range []struct {
		name    string
		s       State
		seller  string
		p       Patch
		ds      []MilestoneDraft
		wantErr error
	}{
		{name: "amount without a new set", s: ms, seller: "s1", p: Patch{Amount: ptr(money.Naira(12000))}, wantErr: ErrMilestoneSum},
		{name: "an amount due no payment may reach", s: ms, seller: "s1", p: Patch{Amount: ptr(money.Max)},
			ds:      []MilestoneDraft{{ID: "n1", Title: "Half", Amount: money.Max / 2}, {ID: "n2", Title: "Rest", Amount: money.Max - money.Max/2}},
			wantErr: ErrDueTooLarge},
		{name: "whoPays seller", s: ms, seller: "s1", p: Patch{WhoPays: ptr("seller")}, wantErr: ErrMilestoneWhoPays},
		{name: "not the seller", s: ms, seller: "x", ds: newSet, wantErr: ErrActionNotAllowed},
		{name: "paid", s: Apply(ms, funded("b1")), seller: "s1", ds: drafts(), wantErr: ErrActionNotAllowed},
		{name: "a standard escrow", s: fold(link()), seller: "s1", ds: drafts(), wantErr: ErrActionNotAllowed},
	} {
		if _, err := EditMilestones(tt.s, tt.seller, tt.p, tt.ds, now); !errors.Is(err, tt.wantErr) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.wantErr)
		}
	}
	if _, err := EditMilestones(ms, "s1", Patch{Purpose: ptr("New purpose")}, nil, now); err != nil {
		t.Fatalf("edit keeping the set: %v", err)
	}

	// Conversion: whoPays becomes buyer, the fee is recomputed on the amount.
	std := fold(link(whoPays(Seller)))
	conv, err := ConvertToMilestones(std, "s1", nil, drafts(), now)
	if err != nil {
		t.Fatal(err)
	}
	after := Apply(std, conv)
	if after.Type() != MilestoneSettlement || after.Terms.WhoPays != Buyer || after.Fee != money.Naira(250) || len(after.Milestones) != 3 ||
		after.Held() != money.Naira(10250) {
		t.Fatalf("converted %+v", after)
	}
	for _, tt := range []struct {
		name    string
		s       State
		amount  *money.Amount
		wantErr error
	}{
		{name: "with an additional fee", s: fold(link(), feeSet(money.Naira(100), true)), wantErr: ErrConvertAdditionalFee},
		{name: "already a milestone escrow", s: ms, wantErr: ErrActionNotAllowed},
		{name: "paid", s: fold(funds(0)...), wantErr: ErrActionNotAllowed},
		{name: "a multi-unit link", s: fold(link(multi(3))), wantErr: ErrActionNotAllowed},
		{name: "new amount that the set does not match", s: std, amount: ptr(money.Naira(20000)), wantErr: ErrMilestoneSum},
	} {
		if _, err := ConvertToMilestones(tt.s, "s1", tt.amount, drafts(), now); !errors.Is(err, tt.wantErr) {
			t.Errorf("convert %s: %v, want %v", tt.name, err, tt.wantErr)
		}
	}
}
