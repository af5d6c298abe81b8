package paystackgw

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/internal/gateway"
	"github.com/escrowd/escrowd/internal/paystack"
)

// Charges collects through Paystack: customers and dedicated accounts,
// transaction initialize, verify and list.
type Charges struct {
	Client *paystack.Client
	// DVABank is the preferred_bank of dedicated accounts.
	DVABank string
}

var _ gateway.Charges = Charges{}

// ProviderEmail is the email a customer is known by at Paystack: their
// own, plus-addressed with their id. Paystack keeps one customer (and so
// one dedicated account) per email, and one person may be a customer of
// several merchants, so each of them needs an address of their own; mail
// to it still reaches the person.
func ProviderEmail(customerID, email string) (string, error) {
	local, host, ok := strings.Cut(strings.TrimSpace(email), "@")
	if !ok || local == "" || host == "" {
		return "", fmt.Errorf("paystack: customer %s has no email address", customerID)
	}
	if i := strings.IndexByte(local, '+'); i >= 0 {
		local = local[:i]
	}
	tag := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return -1
	}, customerID)
	return local + "+" + tag + "@" + host, nil
}

func (c Charges) OpenDepositAccount(ctx context.Context, h gateway.DepositHolder) (string, payment.BankAccount, error) {
	email, err := ProviderEmail(h.CustomerID, h.Email)
	if err != nil {
		return "", payment.BankAccount{}, err
	}
	cu, err := c.Client.CreateCustomer(ctx, paystack.CustomerRequest{Email: email, FirstName: h.FirstName, LastName: h.LastName,
		Phone: h.Phone, Metadata: map[string]any{"customer_id": h.CustomerID}})
	if err != nil {
		return "", payment.BankAccount{}, mapError(err)
	}
	acct, err := c.Client.CreateDedicatedAccount(ctx, paystack.DedicatedAccountRequest{Customer: cu.CustomerCode,
		PreferredBank: c.DVABank, FirstName: h.FirstName, LastName: h.LastName, Phone: h.Phone})
	if err != nil {
		return "", payment.BankAccount{}, mapError(err)
	}
	if acct.AccountNumber == "" {
		// Assigned later (by an event this service does not act on): asked
		// again on the next need.
		return "", payment.BankAccount{}, fmt.Errorf("%w: paystack has not assigned the dedicated account yet", ErrUncertain)
	}
	return cu.CustomerCode, payment.BankAccount{BankName: acct.BankName, AccountNumber: acct.AccountNumber, AccountName: acct.AccountName}, nil
}

// Reference is the transaction reference of a record: the alphabet and
// derivation of transfer references, which Paystack's transaction
// references accept too.
func (Charges) Reference(recordID string) string { return paystack.TransferReference(recordID) }

func (c Charges) Initialize(ctx context.Context, r gateway.ChargeRequest) (string, error) {
	auth, err := c.Client.InitializeTransaction(ctx, paystack.InitializeRequest{Email: r.Email, Amount: r.Amount.Kobo(),
		Reference: r.Reference, CallbackURL: r.CallbackURL, Channels: r.Channels, Currency: "NGN"})
	if err != nil {
		return "", mapError(err)
	}
	if auth.AuthorizationURL == "" {
		return "", fmt.Errorf("%w: paystack answered no authorization_url", ErrUncertain)
	}
	return auth.AuthorizationURL, nil
}

func (c Charges) Charge(ctx context.Context, reference string) (payment.ProviderCharge, error) {
	t, err := c.Client.VerifyTransaction(ctx, reference)
	if paystack.IsNotFound(err) {
		return payment.ProviderCharge{}, fmt.Errorf("%w: %v", gateway.ErrChargeUnknown, err)
	}
	if err != nil {
		return payment.ProviderCharge{}, mapError(err)
	}
	if t.Reference != reference {
		return payment.ProviderCharge{}, fmt.Errorf("%w: paystack answered about %q when asked about %q", ErrUncertain, t.Reference, reference)
	}
	return chargeOf(t)
}

func (c Charges) Charges(ctx context.Context, from, to time.Time) ([]payment.ProviderCharge, error) {
	list, err := c.Client.ListTransactions(ctx, paystack.ListParams{From: from, To: to})
	if err != nil {
		return nil, mapError(err)
	}
	out := make([]payment.ProviderCharge, 0, len(list))
	for _, t := range list {
		if !t.CreatedAt.IsZero() && (t.CreatedAt.Before(from) || !t.CreatedAt.Before(to)) {
			continue
		}
		pc, err := chargeOf(t)
		if err != nil {
			return nil, err
		}
		out = append(out, pc)
	}
	return out, nil
}

// chargeOf translates a transaction. Paystack's amounts are kobo.
func chargeOf(t paystack.Transaction) (payment.ProviderCharge, error) {
	if t.Currency != "" && t.Currency != "NGN" {
		return payment.ProviderCharge{}, errors.New("paystack: a transaction in " + t.Currency)
	}
	at := t.PaidAt
	if at.IsZero() {
		at = t.CreatedAt
	}
	pc := payment.ProviderCharge{Reference: t.Reference, Status: ChargeStatus(t.Status), Amount: money.Amount(t.Amount),
		Fee: money.Amount(t.Fees), Channel: t.Channel, At: at}
	if t.Channel == paystack.ChannelDedicatedNUBAN {
		pc.Account = t.ReceiverAccountNumber
	}
	return pc, nil
}

// ChargeStatus translates a transaction's status: only success is money
// received; failed and reversed never will be; anything else (abandoned
// until the payer finishes, ongoing, pending, queued, processing) is not
// known yet.
func ChargeStatus(s string) payment.ChargeStatus {
	switch s {
	case paystack.TransactionSuccess:
		return payment.ChargeSucceeded
	case paystack.TransactionFailed, paystack.TransactionReversed:
		return payment.ChargeFailed
	}
	return payment.ChargePending
}
