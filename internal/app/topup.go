// Test-wallet top-ups.

package app

import (
	"context"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/domain/wallet"
	"github.com/escrowd/escrowd/eventstore"
)

// TopUp credits a test wallet (once a day per customer) as a settled
// deposit.
func (s *Service) TopUp(ctx context.Context, a Actor, customerID string, amount money.Amount) (ledger.Record, eventstore.Position, error) {
	res, err := s.TopUpWallet(ctx, a, customerID, amount)
	return res.Record, res.Position, err
}

// TopUpResult is a top-up's deposit record and the main balance right
// after it (top-up answers carry mainBalance).
type TopUpResult struct {
	Record      ledger.Record
	MainBalance money.Amount
	Position    eventstore.Position
}

// TopUpWallet is TopUp, also answering the balance the credit left: the
// wallet's state the append checked, plus the credit, so no later write
// can show in it.
func (s *Service) TopUpWallet(ctx context.Context, a Actor, customerID string, amount money.Amount) (TopUpResult, error) {
	if a.Environment != domain.Test {
		return TopUpResult{}, domain.Errorf(domain.Forbidden, "This route is only available on staging environment")
	}
	id := s.newRecordID()
	ref := "TOPUP-" + id
	created, settled, err := payment.TopUp(payment.Intent{ID: id, Reference: ref, Amount: amount, CustomerID: customerID,
		MerchantID: a.MerchantID, Environment: a.Environment, At: s.Engine.Now()})
	if err != nil {
		return TopUpResult{}, err
	}
	stream := payment.StreamID(a.MerchantID, a.Environment, ref)
	var balance money.Amount
	res, err := s.Engine.Do(ctx, a.meta(), func(tx *Tx) error {
		if _, err := loadOwnCustomer(tx, a, customerID, domain.Errorf(domain.NotFound, "Customer not found")); err != nil {
			return err
		}
		// postEffect checks a top-up against the wallet it reads; this is
		// the same read (the tx's), at the revision the append expects.
		w, err := Read(tx, WalletKind, customerID)
		if err != nil {
			return err
		}
		if err := s.postEffect(tx, settled, wallet.Posting{TopUp: true}); err != nil {
			return err
		}
		balance = w.Main + amount
		Record(tx, PaymentKind, stream, created, settled)
		return nil
	})
	return TopUpResult{Record: settled.Records[0], MainBalance: balance, Position: res.Position}, err
}
