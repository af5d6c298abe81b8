package escrow

import (
	"errors"
	"testing"
)

// TestTransitionTable checks every action in every status of every kind of
// escrow against a table written out independently of the one in
// transitions.go, and the message each refusal carries.
func TestTransitionTable(t *testing.T) {
	const (
		std = StandardSettlement
		ms  = MilestoneSettlement
		vlt = VaultSettlement
	)
	type key struct {
		typ    SettlementType
		status Status
	}
	allowed := map[key]map[Action]bool{
		{std, Pending}:       {ActEdit: true, ActConvert: true, ActDelete: true, ActSetAdditionalFee: true, ActPay: true},
		{std, Ongoing}:       {ActConfirm: true, ActClaim: true, ActOpenDispute: true, ActExtendWindow: true, ActPartialRefund: true},
		{std, Disputed}:      {ActAnswerDispute: true, ActResolve: true, ActPartialRefund: true},
		{std, Investigating}: {ActResolve: true},
		{ms, Pending}:        {ActEditMilestones: true, ActDelete: true, ActPay: true},
		{ms, Ongoing}:        {ActReleaseMilestone: true, ActOpenDispute: true},
		{ms, Disputed}:       {ActAnswerDispute: true, ActResolve: true},
		{ms, Investigating}:  {ActResolve: true},
		{vlt, Ongoing}:       {ActDeclareWinner: true, ActCancelVault: true},
	}
	statuses := []Status{Pending, Ongoing, Disputed, Investigating, Completed, Claimed, Refunded, Split}
	for _, typ := range []SettlementType{std, ms, vlt} {
		for _, st := range statuses {
			s := State{ID: "e1", SettlementType: typ, Status: st}
			for _, a := range Actions {
				want := allowed[key{typ, st}][a]
				if got := s.Allows(a); got != want {
					t.Errorf("%s %s %q: allowed %v, want %v", typ, st, a, got, want)
				}
				err := s.may(a)
				if want {
					if err != nil {
						t.Errorf("%s %s %q: may = %v", typ, st, a, err)
					}
					continue
				}
				wantErr := ErrActionNotAllowed
				switch {
				case a == ActPay:
					wantErr = ErrNotCheckoutable
				case a == ActSetAdditionalFee && typ != std:
					wantErr = ErrFeeStandardOnly
				case a == ActSetAdditionalFee:
					wantErr = ErrFeeFrozen
				case a == ActResolve:
					wantErr = ErrNotUnderDispute
				case (a == ActOpenDispute || a == ActAnswerDispute) && typ == vlt:
					wantErr = ErrVaultNotDisputable
				case (a == ActConfirm || a == ActClaim || a == ActReleaseMilestone || a == ActExtendWindow) && (st == Disputed || st == Investigating):
					wantErr = ErrUnderDispute
				case (a == ActDeclareWinner || a == ActCancelVault) && typ == vlt && st.Terminal():
					wantErr = ErrVaultSettled
				}
				if !errors.Is(err, wantErr) {
					t.Errorf("%s %s %q: refused with %v, want %v", typ, st, a, err, wantErr)
				}
			}
		}
	}
}

// A milestone escrow whose milestones were all released has nothing left
// to dispute, and says so.
func TestDisputeRefusedWhenEveryMilestoneReleased(t *testing.T) {
	s := State{ID: "e1", SettlementType: MilestoneSettlement, Status: Completed,
		Milestones: []Milestone{{ID: "m1", Status: MilestoneReleased}, {ID: "m2", Status: MilestoneReleased}}}
	if err := s.may(ActOpenDispute); !errors.Is(err, ErrAllMilestonesReleased) {
		t.Fatalf("dispute of a released milestone escrow: %v", err)
	}
	s.Milestones[1].Status = MilestoneRefunded // closed by a refund: nothing special to say
	if err := s.may(ActOpenDispute); !errors.Is(err, ErrActionNotAllowed) {
		t.Fatalf("dispute of a refunded milestone escrow: %v", err)
	}
}

// An escrow stored before settlementType was recorded is a standard one.
func TestSettlementTypeDefaultsToStandard(t *testing.T) {
	if got := (State{}).Type(); got != StandardSettlement {
		t.Fatalf("Type() = %s", got)
	}
	if got := fold(link()).SettlementType; got != StandardSettlement {
		t.Fatalf("created state has settlementType %q", got)
	}
	if got := fold(link(func(c *Created) { c.SettlementType = MilestoneSettlement })).Type(); got != MilestoneSettlement {
		t.Fatalf("milestone escrow has type %s", got)
	}
}
