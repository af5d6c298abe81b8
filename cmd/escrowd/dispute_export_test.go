package main

import (
	"context"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/projections"
)

// TestAuditAndExportOfDisputesAndMilestones: the operator commands read
// the dispute and milestone events like every other: the audit of a
// merchant with a split dispute and a released milestone is clean, and the
// export shows those events.
func TestAuditAndExportOfDisputesAndMilestones(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewURL(t)
	env := testEnv(t, db)
	var pos eventstore.Position
	last := newShop(t, env, db, "Shop", "08031119001", &pos).merchantID
	svc := app.NewService(app.NewEngine(env.Store, 100))
	a := app.Actor{MerchantID: last, Environment: domain.Test, KeyID: "k"}
	newCustomer := func(phone string) string {
		t.Helper()
		cid, _, err := svc.CreateCustomer(ctx, a, customer.NewCustomer{Firstname: "B", Lastname: "C", Email: phone + "@x.co", Phone: phone})
		if err != nil {
			t.Fatal(err)
		}
		return cid
	}
	seller, buyer := newCustomer("08031119002"), newCustomer("08031119003")
	if _, _, err := svc.TopUp(ctx, a, buyer, money.Naira(50000)); err != nil {
		t.Fatal(err)
	}
	perms := customer.Permissions{CanBuy: true, CanSell: true, CanWithdraw: true}
	check := func(res app.EscrowResult, err error) escrow.State {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return res.Escrow
	}
	es := check(svc.CreateEscrow(ctx, a, seller, escrow.Draft{Amount: money.Naira(10000), Purpose: "x", WhoPays: "both"}))
	if _, err := svc.PayEscrows(ctx, a, buyer, perms, app.EscrowPayment{Reference: "p1", Amount: es.Due(), EscrowIDs: []string{es.ID}}); err != nil {
		t.Fatal(err)
	}
	check(svc.SubmitDispute(ctx, a, buyer, es.ID, "broken", ""))
	s, b := money.Naira(5000), money.Naira(4875)
	check(svc.ResolveDispute(ctx, a, es.ID, escrow.Resolution{Status: "SPLIT", SellerAmount: &s, BuyerAmount: &b}))
	ms := check(svc.CreateMilestoneEscrow(ctx, a, seller, escrow.Draft{Amount: money.Naira(2000), Purpose: "job"},
		[]escrow.MilestoneDraft{{Title: "a", Amount: money.Naira(1000)}, {Title: "b", Amount: money.Naira(1000)}}))
	if _, err := svc.PayEscrows(ctx, a, buyer, perms, app.EscrowPayment{Reference: "p2", Amount: ms.Due(), EscrowIDs: []string{ms.ID}}); err != nil {
		t.Fatal(err)
	}
	res, err := svc.ConfirmMilestone(ctx, a, buyer, ms.ID, ms.Milestones[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := projections.CatchUpTo(ctx, env.Store, env.Pool, nil, res.Position, env.Projectors...); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := runEscrowd(t, db, "audit", "--merchant", last)
	if code != 0 || !strings.Contains(out, "clean") {
		t.Fatalf("audit: exit %d\n%s%s", code, out, stderr)
	}
	out, stderr, code = runEscrowd(t, db, "events", "export", "--merchant", last)
	if code != 0 {
		t.Fatalf("events export: exit %d %s", code, stderr)
	}
	types := map[string]bool{}
	for _, l := range exported(t, out) {
		types[l.Type] = true
	}
	for _, typ := range []string{"escrow.dispute_submitted", "escrow.dispute_resolved", "escrow.milestone_confirmed"} {
		if !types[typ] {
			t.Fatalf("no %s exported: %v", typ, types)
		}
	}
}
