package escrow

import (
	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/money"
)

// ErrDueTooLarge refuses an escrow whose amount due (amount, the buyer's
// fee share and the additional fee) would pass what one payment may be
// (money.Max): nobody could ever pay it.
var ErrDueTooLarge = domain.Invalidf("The amount due (amount, fee and additional fee) must be at most %d", money.Max.Kobo()/100)

// checkPayable refuses terms whose amount due passes money.Max.
func checkPayable(t Terms, fees FeeTerms, additional money.Amount) error {
	if t.Amount > money.Max || additional > money.Max {
		return ErrDueTooLarge
	}
	due := t.Amount + FeeShares(Fee(t.Amount, fees.EscrowFeeBps), t.WhoPays).Buyer + additional
	if due > money.Max {
		return ErrDueTooLarge
	}
	return nil
}
