package escrow

import (
	"errors"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/money"
)

// TestEscrowsArePayable: an escrow is never created, edited or given an
// additional fee such that its amount due passes money.Max, which no
// payment may exceed.
func TestEscrowsArePayable(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fees := FeeTerms{EscrowFeeBps: 250}
	create := func(amount money.Amount, whoPays string) (Created, error) {
		return Create("e1", "PT_1", "m1", domain.Test, "s1", fees, Draft{Amount: amount, Purpose: "Phone", WhoPays: whoPays}, at)
	}
	if _, err := create(money.Max, "buyer"); !errors.Is(err, ErrDueTooLarge) {
		t.Fatalf("buyer pays the fee on money.Max: %v", err)
	}
	ev, err := create(money.Max, "seller") // due is the amount alone
	if err != nil {
		t.Fatalf("seller pays the fee on money.Max: %v", err)
	}
	s := Apply(State{}, ev)
	if s.Due() != money.Max {
		t.Fatalf("due %s", s.Due())
	}
	if _, err := SetAdditionalFee(s, money.Naira(1), nil, at); !errors.Is(err, ErrDueTooLarge) {
		t.Fatalf("an additional fee past money.Max: %v", err)
	}
	buyer := "buyer"
	if _, err := Edit(s, "s1", Patch{WhoPays: &buyer}, at); !errors.Is(err, ErrDueTooLarge) {
		t.Fatalf("an edit making the buyer pay the fee: %v", err)
	}
	if _, err := create(money.Naira(1000), "buyer"); err != nil {
		t.Fatalf("an ordinary escrow: %v", err)
	}
}
