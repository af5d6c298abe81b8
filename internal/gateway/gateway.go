// Package gateway holds the ports to money outside the ledger (a collection
// gateway that receives deposits, payout providers that pay withdrawals
// out) and the test adapters the test environment uses.
package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/escrowd/escrowd/domain/ledger"
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

// Payouts pays withdrawals out. Two verifies never ask at once (the payout
// lease, domain/payment), but Pay must still be idempotent per record id:
// the service asks again after a crash between debiting and hearing back,
// and after a call that outlived payment.PayoutCallTimeout (ctx ends then).
// A nil error is the provider's final answer: Outcome.OK false reverses the
// debit to the customer, so a provider that does not know whether it paid
// (a timeout of its own) must return an error, which leaves the debit
// standing and the payout to be asked again.
type Payouts interface {
	Pay(ctx context.Context, withdrawal ledger.Record) (payment.Outcome, error)
}

// Set is the gateways of one environment; a nil member is not configured.
type Set struct {
	Collection Collection
	Payouts    Payouts
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

// TestPayouts pays every withdrawal out, except bank payouts to account
// numbers ending in 0000, which the "bank" rejects.
type TestPayouts struct{}

func (TestPayouts) Pay(_ context.Context, w ledger.Record) (payment.Outcome, error) {
	if w.WithdrawalDetails != nil && strings.HasSuffix(w.WithdrawalDetails.AccountNumber, "0000") {
		return payment.Outcome{OK: false, Reason: "The beneficiary bank rejected the transfer"}, nil
	}
	return payment.Outcome{OK: true}, nil
}

// Test is the test environment's set.
func Test() Set { return Set{Collection: TestCollection{}, Payouts: TestPayouts{}} }
