package audit_test

import (
	"fmt"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/internal/app"
)

// TestAuditEscrowSettlements audits real escrow money: funding, confirmed
// and claimed settlements (commission, delivery, merchant sales), and a
// corrupted merchant balance.
func TestAuditEscrowSettlements(t *testing.T) {
	e := newEnv(t)
	m := e.merchant("Shop")
	a := actor(m, domain.Test)
	seller := e.customer(a, "s@x.com", "08037770001")
	buyer := e.customer(a, "b@x.com", "08037770002")
	e.topUp(a, buyer, 100000)

	create := func(sellerID string, who string, qty int) escrow.State {
		t.Helper()
		res, err := e.svc.CreateEscrow(e.ctx, a, sellerID, escrow.Draft{Amount: money.Naira(10000), Purpose: "x", WhoPays: who, TotalQuantity: &qty})
		if err != nil {
			t.Fatal(err)
		}
		e.wrote(res.Position)
		return res.Escrow
	}
	for i, who := range []string{"buyer", "seller", "both"} {
		es := create(seller, who, 1)
		if who == "buyer" {
			fee := true
			res, err := e.svc.SetAdditionalFee(e.ctx, a, es.ID, money.Naira(300), &fee)
			if err != nil {
				t.Fatal(err)
			}
			es = res.Escrow
		}
		paid, err := e.svc.PayEscrows(e.ctx, a, buyer, allowed, app.EscrowPayment{Reference: fmt.Sprintf("p-%d", i), Amount: es.Due(), EscrowIDs: []string{es.ID}})
		if err != nil {
			t.Fatal(err)
		}
		e.wrote(paid.Position)
		res, err := e.svc.ConfirmEscrow(e.ctx, a, buyer, paid.Escrows[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		e.wrote(res.Position)
	}
	// Commission 3 × 125 plus a 300 delivery: 675 in the merchant main balance.
	// A merchant sale from a multi-unit link, left funded (money held).
	link := create("", "buyer", 3)
	paid, err := e.svc.PayEscrows(e.ctx, a, buyer, allowed, app.EscrowPayment{Reference: "p-link", Amount: link.Due(), EscrowIDs: []string{link.ID}})
	if err != nil {
		t.Fatal(err)
	}
	e.wrote(paid.Position)

	rep := e.audit(m)
	expectClean(t, rep)
	e.exec(`UPDATE rm_balances SET balance = balance - 1 WHERE holder = 'merchant' AND bucket = 'main' AND merchant_id = $1`, m)
	expectLines(t, e.audit(m), fmt.Sprintf("balance test merchant:%s:main: expected 675, found 674.99", m))
	e.restore()
	expectClean(t, e.audit(m))
}
