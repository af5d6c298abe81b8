package payment

import (
	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/reference"
)

// Recipient is a bank account registered with the provider as a payout
// destination: the provider pays only to destinations it knows, and one
// registration serves every payout to the account.
type Recipient struct {
	Code string // the provider's id of the destination ("" before it is registered)
}

// RecipientRegistered keeps the provider's id of a bank account.
type RecipientRegistered struct {
	BankCode      string `json:"bankCode"`
	AccountNumber string `json:"accountNumber"`
	Code          string `json:"code"`
}

func (RecipientRegistered) EventType() string { return "recipient.registered" }

// RecipientRegistry decodes recipient events.
var RecipientRegistry = domain.NewRegistry(func() domain.Event { return &RecipientRegistered{} })

// RecipientKey is what names a bank account's recipient stream, before
// the blind index hides it: a bank's two codes name one account.
func RecipientKey(bankCode, accountNumber string) string {
	if b, ok := reference.FindBank(bankCode); ok {
		bankCode = b.Code
	}
	return bankCode + ":" + accountNumber
}

// RecipientID is the recipient stream id in an environment of the bank
// account whose RecipientKey has the blind index index: an account number
// is personal, and one hashed without a key is found again by trying
// every number.
func RecipientID(env domain.Environment, index string) string {
	return string(env) + "." + index
}

// ApplyRecipient folds a recipient event; the first registration stands.
func ApplyRecipient(r Recipient, ev domain.Event) Recipient {
	if e, ok := ev.(RecipientRegistered); ok && r.Code == "" {
		r.Code = e.Code
	}
	return r
}
