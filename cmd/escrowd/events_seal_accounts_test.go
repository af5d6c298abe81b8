package main

import (
	"context"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/domaintest"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/projections"
)

// TestEventsSealRenamesAccountStreams: streams a version without blind
// indexes named by a bank account (a dedicated account's link to its
// holder, by the plain number; a payout destination's recipient) are
// renamed by the account's blind index: no stream name holds the numbers
// any more, and the application finds the holder and the recipient under
// the names it gives them now. Before, serve refuses to start.
func TestEventsSealRenamesAccountStreams(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewURL(t)
	_, _, sets := simulatedPaystack(t, "sk_test_seal")
	env := testEnv(t, db)
	plain := app.NewService(app.NewEngine(env.Raw, 100)) // no blind index: streams named as before
	plain.Gateways = sets
	m, err := plain.CreateMerchant(ctx, "Old Shop", true, "NG", func(k string) string { return "d-" + k })
	if err != nil {
		t.Fatal(err)
	}
	a := app.Actor{MerchantID: m.MerchantID, Environment: domain.Test, KeyID: "k"}
	may := customer.Permissions{CanBuy: true, CanSell: true, CanWithdraw: true}
	cid, _, err := plain.CreateCustomer(ctx, a, customer.NewCustomer{Firstname: "Ada", Lastname: "Obi", Email: "ada@old.example", Phone: "08035550011"})
	if err != nil {
		t.Fatal(err)
	}
	dep, err := plain.CreateIntent(ctx, a, cid, may, app.IntentRequest{Reference: "dep-old", Type: ledger.Deposit, Amount: money.Naira(100)})
	if err != nil || dep.DepositAccount == nil || dep.DepositAccount.AccountNumber == "" {
		t.Fatalf("deposit intent: %+v %v", dep, err)
	}
	dedicated := dep.DepositAccount.AccountNumber
	if _, _, err := plain.TopUp(ctx, a, cid, money.Naira(5000)); err != nil {
		t.Fatal(err)
	}
	payee := domaintest.NUBAN(t, "058", "31", false)
	if _, err := plain.CreateIntent(ctx, a, cid, may, app.IntentRequest{Reference: "wd-old", Type: ledger.Withdrawal, Amount: money.Naira(1000),
		Withdrawal: &ledger.WithdrawalDetails{AccountNumber: payee, BankCode: "058"}}); err != nil {
		t.Fatal(err)
	}
	_, pos, err := plain.Verify(ctx, a, cid, may, "wd-old")
	if err != nil {
		t.Fatal(err)
	}
	if err := projections.CatchUpTo(ctx, env.Store, env.Pool, nil, pos, env.Projectors...); err != nil {
		t.Fatal(err)
	}
	named := func(value string) int {
		t.Helper()
		var n int
		if err := env.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM es_streams WHERE strpos(stream_id, $1) > 0)
			+ (SELECT count(*) FROM es_events WHERE strpos(stream_id, $1) > 0)`, value).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if named(dedicated) == 0 || named(payee) == 0 {
		t.Fatalf("the old names: %d streams by the dedicated account, %d by the payee's", named(dedicated), named(payee))
	}

	if _, err := cli(t, db, "serve", "--addr", "127.0.0.1:0"); err == nil || !strings.Contains(err.Error(), "events seal --i-have-a-backup") {
		t.Fatalf("serve over streams named by account numbers: %v", err)
	}
	out, err := cli(t, db, "events", "seal", "--i-have-a-backup")
	if err != nil || !strings.Contains(out, "and 2 account streams") {
		t.Fatalf("seal: %v %s", err, out)
	}
	if named(dedicated) != 0 || named(payee) != 0 {
		t.Fatalf("after sealing, names still hold the numbers: %d, %d", named(dedicated), named(payee))
	}
	svc := service(env)
	index := func(purpose, value string) string {
		t.Helper()
		v, err := env.Keyring.BlindIndex(ctx, purpose, value)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	link, _, err := app.Load(ctx, svc.Engine, app.AccountLinkKind, payment.AccountLinkID(domain.Test, index(app.AccountPurpose, dedicated)))
	if err != nil || link.CustomerID != cid {
		t.Fatalf("the dedicated account's holder under its new name: %+v %v", link, err)
	}
	r, _, err := app.Load(ctx, svc.Engine, app.RecipientKind, payment.RecipientID(domain.Test, index(app.RecipientPurpose, payment.RecipientKey("058", payee))))
	if err != nil || r.Code == "" {
		t.Fatalf("the payee's recipient under its new name: %+v %v", r, err)
	}
	if out, err := cli(t, db, "events", "seal", "--i-have-a-backup"); err != nil || !strings.Contains(out, "and 0 account streams") {
		t.Fatalf("second run: %v %s", err, out)
	}
}
