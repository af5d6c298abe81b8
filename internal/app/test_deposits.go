package app

import (
	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/internal/gateway"
)

// MaxTestDeposit bounds one deposit on the built-in test gateway, which
// confirms every deposit without any money behind it: test balances stay
// test-sized, and a key cannot mint sums that overflow what the service
// adds up.
var MaxTestDeposit = money.Naira(100_000)

// ErrTestDepositTooLarge refuses a test deposit over MaxTestDeposit.
var ErrTestDepositTooLarge = domain.Invalidf("A test deposit may be at most %s", MaxTestDeposit)

// checkTestDeposit refuses a deposit past MaxTestDeposit when collection is
// the built-in test gateway; a real provider's deposits are its own.
func checkTestDeposit(collection gateway.Collection, amount money.Amount) error {
	if _, builtIn := collection.(gateway.TestCollection); builtIn && amount > MaxTestDeposit {
		return ErrTestDepositTooLarge
	}
	return nil
}
