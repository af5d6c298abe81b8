// Package gateway holds the ports to money outside the ledger (a collection
// gateway that receives deposits, payout providers that pay withdrawals
// out) and the test adapters the test environment uses.
package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/domain/reference"
)

// Collection receives customers' deposits.
type Collection interface {
	// Instructions tells the payer where to pay a staged deposit.
	Instructions(ctx context.Context, deposit ledger.Record) (*payment.TestAccount, error)
	// Confirm reports whether the deposit has been received. It is a query:
	// asking twice has no effect.
	Confirm(ctx context.Context, deposit ledger.Record) (payment.Outcome, error)
}

// Payouts pays withdrawals out through a rail that may answer at once or
// later: Send asks the provider to pay a debited withdrawal and answers
// whatever the provider says (accepted and pending, or already final);
// Status asks where a payout stands (a poll, a provider's event being
// verified, reconciliation). The domain decides what each answer does
// (payment.AnswerSend, payment.SettlePayout): adapters only translate the
// provider's words into a payment.PayoutAnswer.
//
// Two sends never run at once (the payout lease, domain/payment), but Send
// must still be idempotent per record id: the service sends again after a
// crash between debiting and hearing back, after a call that outlived
// payment.PayoutCallTimeout (ctx ends then), and after an error. An error,
// or payment.ProviderUnknown, means the provider's answer is unknown (a
// timeout, a 5xx, a lost answer): the debit stands and nothing is decided.
// A refusal that is certain (the provider will never pay this payout) is
// payment.ProviderFailed, and returns the debit.
type Payouts interface {
	// Reference is the provider's reference of a withdrawal's payout. It
	// depends on the withdrawal's record id alone, so every send of one
	// withdrawal names the same payout, and the provider's events about
	// it can be traced back to it.
	Reference(withdrawal ledger.Record) string
	// Send asks the provider to pay withdrawal out, to recipient (the
	// provider's id of a bank withdrawal's destination, from Recipients;
	// "" when the environment has none).
	Send(ctx context.Context, withdrawal ledger.Record, recipient string) (payment.PayoutAnswer, error)
	// Status asks the provider where the payout of withdrawal stands. It
	// is a query: asking twice has no effect. A payout the provider has no
	// record of is payment.ProviderUnknown.
	Status(ctx context.Context, withdrawal ledger.Record) (payment.PayoutAnswer, error)
}

// Recipients registers payout destinations with the provider, which pays
// only to destinations it knows. The service asks once per account and
// keeps the answer (a payment.RecipientRegistered event).
type Recipients interface {
	// Recipient registers a bank account (name as resolved) and answers
	// the provider's id of it. Asking again for one account must be
	// harmless (the provider answers the same or an equivalent id).
	Recipient(ctx context.Context, to ledger.WithdrawalDetails) (string, error)
}

// Accounts resolves bank accounts at the provider.
type Accounts interface {
	// Resolve answers the name the bank holds account accountNumber of
	// bank bankCode under; ErrAccountUnresolved when the bank knows no
	// such account. Any other error is the provider's being unreachable.
	Resolve(ctx context.Context, bankCode, accountNumber string) (name string, err error)
}

// Transfers lists the provider's payouts of a period, for reconciliation.
type Transfers interface {
	// Transfers are the payouts the provider created in [from, to).
	Transfers(ctx context.Context, from, to time.Time) ([]ProviderTransfer, error)
}

// ProviderTransfer is a payout as the provider lists it.
type ProviderTransfer struct {
	// Reference is the provider's reference (Payouts.Reference of the
	// withdrawal it pays, for the payouts this service made).
	Reference string
	Amount    money.Amount
	Answer    payment.PayoutAnswer
}

// Charges collects money through a provider's charges: transfers into
// customers' dedicated accounts, and payments the payer completes on the
// provider's page. What a charge does to the ledger is the domain's
// (payment.CreditDeposit, payment.FundFromCharge), decided only on the
// provider's answer to Charge.
type Charges interface {
	// OpenDepositAccount gets the provider customer and the dedicated
	// account of holder. Asking again for one customer must be harmless
	// (the provider answers the same account).
	OpenDepositAccount(ctx context.Context, holder DepositHolder) (providerCustomer string, account payment.BankAccount, err error)
	// Reference is the provider's reference of the charge that pays the
	// record recordID: the same id always gives the same reference.
	Reference(recordID string) string
	// Initialize starts a payment the payer completes on the page it
	// answers.
	Initialize(ctx context.Context, r ChargeRequest) (authorizationURL string, err error)
	// Charge asks the provider about the charge reference: a query.
	// ErrChargeUnknown when the provider has no such charge.
	Charge(ctx context.Context, reference string) (payment.ProviderCharge, error)
	// Charges are the charges the provider created in [from, to).
	Charges(ctx context.Context, from, to time.Time) ([]payment.ProviderCharge, error)
}

// DepositHolder is the customer a dedicated account is opened for.
type DepositHolder struct {
	CustomerID string
	Email      string
	FirstName  string
	LastName   string
	Phone      string
}

// ChargeRequest starts a payment at the provider.
type ChargeRequest struct {
	Reference   string // Charges.Reference of the intent's record
	Email       string
	Amount      money.Amount
	CallbackURL string
	// Channels are how the payer may pay ("card", "bank", "ussd").
	Channels []string
}

// ErrChargeUnknown: the provider has no charge under the reference.
var ErrChargeUnknown = errors.New("gateway: the provider has no such charge")

// ErrAccountUnresolved: the bank knows no such account.
var ErrAccountUnresolved = errors.New("gateway: the bank could not resolve the account")

// Set is the gateways of one environment; a nil member is not configured.
type Set struct {
	Collection Collection
	Payouts    Payouts
	// Recipients registers bank payouts' destinations; nil where the
	// payout rail needs none (the built-in test payouts).
	Recipients Recipients
	// Accounts resolves bank accounts' names; nil where none can be
	// (then only the test environment resolves, with invented names).
	Accounts Accounts
	// Transfers lists the provider's payouts for reconciliation; nil
	// where there is nothing to reconcile with (the built-in test
	// payouts).
	Transfers Transfers
	// Charges collects through the provider (dedicated accounts, card,
	// bank and USSD payments); nil where nothing does (then deposits use
	// Collection).
	Charges Charges
	// Events reads the provider's inbound events; nil where the
	// environment's gateways send none (the built-in test gateways).
	Events Events
}

// TestCollection answers every deposit with a test bank account and
// confirms it on verify.
type TestCollection struct{}

// TestDepositBank is the bank test deposits are paid into.
const TestDepositBank = "058"

func (TestCollection) Instructions(_ context.Context, d ledger.Record) (*payment.TestAccount, error) {
	// A stable, valid account number per deposit, so a retried
	// create-intent shows the same instructions.
	sum := sha256.Sum256([]byte(d.MerchantID + "/" + d.Reference))
	serial := fmt.Sprintf("%09d", binary.BigEndian.Uint64(sum[:8])%1_000_000_000)
	check, _ := reference.NUBANCheckDigit(TestDepositBank, serial)
	bank, _ := reference.FindBank(TestDepositBank)
	return &payment.TestAccount{BankName: bank.Name, AccountNumber: serial + string(check),
		AccountName: "ESCROWD TEST COLLECTIONS", Amount: d.Amount}, nil
}

func (TestCollection) Confirm(context.Context, ledger.Record) (payment.Outcome, error) {
	return payment.Outcome{OK: true}, nil
}

// TestPayouts pays every withdrawal out at once, except bank payouts to
// account numbers ending in 0000, which the "bank" returns (status
// reversed). It keeps nothing: Status answers what Send would.
type TestPayouts struct{}

// Reference is the record id: the test rail has no alphabet of its own.
func (TestPayouts) Reference(w ledger.Record) string { return w.ID }

func (TestPayouts) Send(_ context.Context, w ledger.Record, _ string) (payment.PayoutAnswer, error) {
	if w.WithdrawalDetails != nil && strings.HasSuffix(w.WithdrawalDetails.AccountNumber, "0000") {
		return payment.PayoutAnswer{Status: payment.ProviderReversed, Reason: "The beneficiary bank rejected the transfer"}, nil
	}
	return payment.PayoutAnswer{Status: payment.ProviderSucceeded}, nil
}

func (p TestPayouts) Status(ctx context.Context, w ledger.Record) (payment.PayoutAnswer, error) {
	return p.Send(ctx, w, "")
}

// Test is the test environment's set.
func Test() Set { return Set{Collection: TestCollection{}, Payouts: TestPayouts{}} }
