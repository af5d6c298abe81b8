package escrow

import "github.com/escrowd/escrowd/domain"

// Action is something a party asks of an escrow.
type Action string

const (
	ActEdit             Action = "edit"
	ActEditMilestones   Action = "edit milestones"
	ActConvert          Action = "convert to milestones"
	ActDelete           Action = "delete"
	ActSetAdditionalFee Action = "set additional fee"
	ActPay              Action = "pay"
	ActConfirm          Action = "confirm"
	ActClaim            Action = "claim"
	ActReleaseMilestone Action = "release milestone"
	ActOpenDispute      Action = "open dispute"   // the buyer's entry
	ActAnswerDispute    Action = "answer dispute" // the seller's entry
	ActResolve          Action = "resolve dispute"
	ActDeclareWinner    Action = "declare winner"
	ActCancelVault      Action = "cancel vault"
	ActExtendWindow     Action = "extend window"
	ActPartialRefund    Action = "partially refund"
)

// Actions lists every action, for tables that must cover them all.
var Actions = []Action{ActEdit, ActEditMilestones, ActConvert, ActDelete, ActSetAdditionalFee, ActPay, ActConfirm,
	ActClaim, ActReleaseMilestone, ActOpenDispute, ActAnswerDispute, ActResolve, ActDeclareWinner, ActCancelVault, ActExtendWindow,
	ActPartialRefund}

// transitions is the one table of which action each kind of escrow allows
// in each status; everything not listed is refused. Who may ask (buyer,
// seller, merchant) and the action's own rules (a delivery window, a
// split's sum) are checked by the decision itself.
var transitions = map[SettlementType]map[Status][]Action{
	StandardSettlement: {
		Pending:       {ActEdit, ActConvert, ActDelete, ActSetAdditionalFee, ActPay},
		Ongoing:       {ActConfirm, ActClaim, ActOpenDispute, ActExtendWindow, ActPartialRefund},
		Disputed:      {ActAnswerDispute, ActResolve, ActPartialRefund},
		Investigating: {ActResolve},
	},
	MilestoneSettlement: {
		Pending:       {ActEditMilestones, ActDelete, ActPay},
		Ongoing:       {ActReleaseMilestone, ActOpenDispute},
		Disputed:      {ActAnswerDispute, ActResolve},
		Investigating: {ActResolve},
	},
	VaultSettlement: {
		Ongoing: {ActDeclareWinner, ActCancelVault},
	},
}

// Errors of refused transitions.
var (
	ErrUnderDispute          = domain.Invalidf("Escrow is under dispute")
	ErrNotUnderDispute       = domain.Invalidf("Escrow is not under dispute")
	ErrVaultNotDisputable    = domain.Invalidf("Vault escrows cannot be disputed")
	ErrAllMilestonesReleased = domain.Invalidf("All milestones have been released; there are no held funds to dispute")
	ErrFeeStandardOnly       = domain.Invalidf("An additional fee can only be set on a standard escrow")
	ErrVaultSettled          = domain.Invalidf("Vault is already settled")
)

// Allows reports whether the escrow's kind and status allow action a.
func (s State) Allows(a Action) bool {
	for _, x := range transitions[s.Type()][s.Status] {
		if x == a {
			return true
		}
	}
	return false
}

// may returns nil when s allows a, else the refusal a client is shown.
func (s State) may(a Action) error {
	if s.Allows(a) {
		return nil
	}
	return refusal(s, a)
}

// refusal is the message of an action the table refuses in s's status.
func refusal(s State, a Action) error {
	switch a {
	case ActPay:
		return ErrNotCheckoutable
	case ActSetAdditionalFee:
		if s.Type() != StandardSettlement {
			return ErrFeeStandardOnly
		}
		return ErrFeeFrozen
	case ActResolve:
		return ErrNotUnderDispute
	case ActOpenDispute, ActAnswerDispute:
		switch {
		case s.Type() == VaultSettlement:
			return ErrVaultNotDisputable
		case s.Type() == MilestoneSettlement && s.Status.Phase() == Closed && s.allMilestonesReleased():
			return ErrAllMilestonesReleased
		}
	case ActConfirm, ActClaim, ActReleaseMilestone, ActExtendWindow:
		if s.UnderDispute() {
			return ErrUnderDispute
		}
	case ActDeclareWinner, ActCancelVault:
		if s.Type() == VaultSettlement && s.Status.Terminal() {
			return ErrVaultSettled
		}
	}
	return ErrActionNotAllowed
}

// UnderDispute reports whether only the merchant's resolution may settle
// the escrow now.
func (s State) UnderDispute() bool { return s.Status == Disputed || s.Status == Investigating }
