package main

import (
	"context"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/reference"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/projections"
)

// TestEventsSealRewritesPlainHistory: a log written in plain text (the
// store under the codec, as a version without sealing wrote it) is
// refused without --i-have-a-backup; with it, the customer's and the
// merchant's personal and secret values leave es_events (data and stream
// names), reads through the codec answer as before, the email stays
// unique, the audit is clean, and a second run has nothing to do.
func TestEventsSealRewritesPlainHistory(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewURL(t)
	env := testEnv(t, db)
	plain := app.NewService(app.NewEngine(env.Raw, 100))
	m, err := plain.CreateMerchant(ctx, "Old Shop", true, "NG", func(k string) string { return "d-" + k })
	if err != nil {
		t.Fatal(err)
	}
	a := app.Actor{MerchantID: m.MerchantID, Environment: domain.Test, KeyID: "k"}
	cid, _, err := plain.CreateCustomer(ctx, a, customer.NewCustomer{Firstname: "Chidinma", Lastname: "Ezeugwu", Email: "chidi@old.example",
		Phone: "08035550001", BVN: "22298765432"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := plain.TopUp(ctx, a, cid, money.Naira(5000)); err != nil {
		t.Fatal(err)
	}
	serial := "987654321"
	check, _ := reference.NUBANCheckDigit("058", serial)
	account := serial + string(check)
	perms := customer.Permissions{CanBuy: true, CanSell: true, CanWithdraw: true}
	if _, err := plain.CreateIntent(ctx, a, cid, perms, app.IntentRequest{Reference: "wd-old", Type: ledger.Withdrawal, Amount: money.Naira(1000),
		Withdrawal: &ledger.WithdrawalDetails{AccountNumber: account, BankCode: "058"}}); err != nil {
		t.Fatal(err)
	}
	_, pos, err := plain.Verify(ctx, a, cid, perms, "wd-old")
	if err != nil {
		t.Fatal(err)
	}
	if err := projections.CatchUpTo(ctx, env.Store, env.Pool, nil, pos, env.Projectors...); err != nil {
		t.Fatal(err)
	}
	secrets := []string{"chidi@old.example", "08035550001", "22298765432", "Chidinma", "Ezeugwu", account, m.SigningSecrets[domain.Test], m.SigningSecrets[domain.Live]}
	inLog := func() []string {
		t.Helper()
		var found []string
		for _, s := range secrets {
			var n int
			if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM es_events WHERE strpos(data::text, $1) > 0 OR strpos(stream_id, $1) > 0`, s).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				found = append(found, s)
			}
		}
		return found
	}
	if got := inLog(); len(got) != len(secrets) {
		t.Fatalf("the plain log holds only %v", got)
	}

	if _, err := cli(t, db, "events", "seal"); err == nil || !strings.Contains(err.Error(), "--i-have-a-backup") {
		t.Fatalf("without the backup flag: %v", err)
	}
	if got := inLog(); len(got) != len(secrets) {
		t.Fatalf("refused, yet the log changed: it holds only %v", got)
	}
	if _, err := cli(t, db, "serve", "--addr", "127.0.0.1:0"); err == nil || !strings.Contains(err.Error(), "events seal --i-have-a-backup") {
		t.Fatalf("serve over reservations named by plain values: %v", err)
	}
	out, err := cli(t, db, "events", "seal", "--i-have-a-backup")
	if err != nil || !strings.Contains(out, "renamed 2 reservations") || !strings.Contains(out, "clean") {
		t.Fatalf("seal: %v %s", err, out)
	}
	if got := inLog(); len(got) != 0 {
		t.Fatalf("after sealing the log still holds %v", got)
	}
	out, err = cli(t, db, "events", "seal", "--i-have-a-backup")
	if err != nil || !strings.HasPrefix(out, "sealed 0 events, renamed 0 reservations") {
		t.Fatalf("second run: %v %s", err, out)
	}

	// Through the codec the history reads as written.
	svc := service(env)
	c, _, err := app.Load(ctx, svc.Engine, app.CustomerKind, cid)
	if err != nil || c.Email != "chidi@old.example" || c.BVN != "22298765432" || c.Firstname != "Chidinma" {
		t.Fatalf("customer after sealing: %+v %v", c, err)
	}
	if _, _, err := svc.CreateCustomer(ctx, a, customer.NewCustomer{Firstname: "Other", Lastname: "Person", Email: "chidi@old.example", Phone: "08035550002"}); err == nil {
		t.Fatal("a second customer took the sealed history's email")
	}
	if _, err := cli(t, db, "audit", "--merchant", m.MerchantID); err != nil {
		t.Fatal(err)
	}
}
