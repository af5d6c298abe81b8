package httpapi

import (
	"strings"

	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/ledger"
)

// enum is an enumeration a request may send, in the documented spelling
// (which responses use). Requests match it ignoring case: integrations
// written for the public API send "WALLET" or "Buyer".
// This is the one place that rule lives: a route taking another
// enumeration declares it here and passes the field through canonical.
type enum []string

// The enumerations requests send.
var (
	gatewayEnum          = enum{"wallet", "card"}
	whoPaysEnum          = enum{string(escrow.Buyer), string(escrow.Seller), string(escrow.Both)}
	deliveryTimelineEnum = enum{"minutes", "hours", "days"}
	// escrowListingEnum is the type of GET /v1/escrow/transactions.
	escrowListingEnum = enum{"sales", "buy"}
	// transactionTypeEnum is every transaction record's transactionType
	// (create-intent accepts some, history filters by any). The public
	// API's enumeration also names "transfer", which no record here
	// carries (a bank transfer into a reserved account is a deposit): a
	// history filtered by it is valid and empty.
	transactionTypeEnum = enum{string(ledger.Deposit), string(ledger.Withdrawal), "transfer",
		string(ledger.WalletTransfer), string(ledger.EscrowPayment), string(ledger.Commission), string(ledger.Delivery),
		string(ledger.EscrowRelease), string(ledger.EscrowRefund), string(ledger.VaultStake), string(ledger.VaultPayout),
		string(ledger.VaultRefund), string(ledger.Refund)}
)

// canonical returns v in the enumeration's spelling when it is one of its
// values ignoring case and surrounding spaces; anything else comes back
// unchanged, for the validation that follows to refuse by name.
func (e enum) canonical(v string) string {
	t := strings.TrimSpace(v)
	for _, s := range e {
		if strings.EqualFold(t, s) {
			return s
		}
	}
	return v
}

// canonicalPtr is canonical for an optional field.
func (e enum) canonicalPtr(v *string) *string {
	if v == nil {
		return nil
	}
	c := e.canonical(*v)
	return &c
}
