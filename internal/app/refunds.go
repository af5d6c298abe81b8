package app

import (
	"context"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/money"
)

// PartialRefund is the merchant's return of amount of an open standard
// escrow to its buyer. It is decided on the escrow's stream like a
// settlement, so it never lands on an escrow that a confirmation, an
// auto-release or a resolution has settled meanwhile: one of them appends
// first, the other's retry decides on the escrow as it then stands.
func (s *Service) PartialRefund(ctx context.Context, a Actor, id string, amount money.Amount) (EscrowResult, error) {
	return s.changeEscrow(ctx, a, id, func(_ *Tx, e escrow.State) (domain.Event, error) {
		return escrow.PartialRefund(e, a.MerchantID, amount, s.Engine.Now())
	})
}
