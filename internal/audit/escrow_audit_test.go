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

// TestAuditDisputesAndMilestones audits every dispute outcome and a
// milestone escrow released in part and settled by a ruling: the replay of
// their settlements matches every balance and record the read models hold,
// and a corrupted beneficiary balance is found.
func TestAuditDisputesAndMilestones(t *testing.T) {
	e := newEnv(t)
	m := e.merchant("Shop")
	a := actor(m, domain.Test)
	seller := e.customer(a, "s@x.com", "08037771001")
	buyer := e.customer(a, "b@x.com", "08037771002")
	helper := e.customer(a, "h@x.com", "08037771003")
	e.topUp(a, buyer, 100000)
	must := func(res app.EscrowResult, err error) escrow.State {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		e.wrote(res.Position)
		return res.Escrow
	}
	pay := func(es escrow.State, ref string) {
		t.Helper()
		paid, err := e.svc.PayEscrows(e.ctx, a, buyer, allowed, app.EscrowPayment{Reference: ref, Amount: es.Due(), EscrowIDs: []string{es.ID}})
		if err != nil {
			t.Fatal(err)
		}
		e.wrote(paid.Position)
	}
	half := money.Naira(4875)
	for i, r := range []escrow.Resolution{{Status: "COMPLETED"}, {Status: "REFUNDED"},
		{Status: "SPLIT", SellerAmount: &half, BuyerAmount: &half}} {
		es := must(e.svc.CreateEscrow(e.ctx, a, seller, escrow.Draft{Amount: money.Naira(10000), Purpose: "x", WhoPays: "seller"}))
		no := false
		es = must(e.svc.SetAdditionalFee(e.ctx, a, es.ID, money.Naira(200), &no))
		pay(es, fmt.Sprintf("d-%d", i))
		must(e.svc.SubmitDispute(e.ctx, a, buyer, es.ID, "no", ""))
		must(e.svc.ResolveDispute(e.ctx, a, es.ID, r))
	}
	ms := must(e.svc.CreateMilestoneEscrow(e.ctx, a, seller, escrow.Draft{Amount: money.Naira(6000), Purpose: "job"},
		[]escrow.MilestoneDraft{{Title: "a", Amount: money.Naira(1000), CustomerID: helper}, {Title: "b", Amount: money.Naira(5000)}}))
	pay(ms, "ms")
	must(e.svc.ConfirmMilestone(e.ctx, a, buyer, ms.ID, ms.Milestones[0].ID))
	must(e.svc.SubmitDispute(e.ctx, a, buyer, ms.ID, "late", ""))
	must(e.svc.ResolveDispute(e.ctx, a, ms.ID, escrow.Resolution{Status: "REFUNDED"}))

	expectClean(t, e.audit(m))
	e.exec(`UPDATE rm_balances SET balance = balance + 1 WHERE holder = 'customer' AND holder_id = $1 AND bucket = 'main'`, helper)
	if rep := e.audit(m); len(lines(rep)) == 0 {
		t.Fatal("a corrupted beneficiary balance went unnoticed")
	}
	e.restore()
	expectClean(t, e.audit(m))
}
