package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/dashauth"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// TestServeSealsPlainTOTPSecrets: the API role's dashboard, on a database
// where an earlier version kept a TOTP secret in plain text, seals it
// before serving.
func TestServeSealsPlainTOTPSecrets(t *testing.T) {
	db := pgtest.NewURL(t)
	env := testEnv(t, db)
	ctx := context.Background()
	u, _, err := dashauth.NewStore(env.Pool, env.Keyring).CreateUser(ctx, "m1", "ada@example.com", dashauth.Owner, "operator", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, _ := dashauth.NewTOTPKey(u.Email)
	if _, err := env.Pool.Exec(ctx, `UPDATE dashboard_users SET totp_secret = $2, totp_confirmed = true WHERE user_id = $1`, u.ID, key.Secret()); err != nil {
		t.Fatal(err)
	}

	users, err := dashboardUsers(ctx, env)
	if err != nil || users == nil {
		t.Fatalf("dashboard users: %v %v", users, err)
	}
	var plain int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM dashboard_users WHERE totp_secret IS NOT NULL OR totp_sealed IS NULL`).Scan(&plain); err != nil || plain != 0 {
		t.Fatalf("%d users' secrets left unsealed (%v)", plain, err)
	}
}

// TestDashboardUserCreateIsRecorded: the operator's dashboard-user create
// is recorded in the merchant's stream, the operator as the actor.
func TestDashboardUserCreateIsRecorded(t *testing.T) {
	db := pgtest.NewURL(t)
	merchantID := cliMerchant(t, db, "Acme")
	out, err := cli(t, db, "dashboard-user", "create", "--merchant", merchantID, "--email", "ada@shop.example", "--role", "owner")
	if err != nil {
		t.Fatal(err)
	}
	env := testEnv(t, db)
	events, err := env.Store.ReadStream(context.Background(), app.MerchantKind.StreamName(merchantID), 0, 1000)
	if err != nil || len(events) == 0 {
		t.Fatalf("%d events, %v", len(events), err)
	}
	last := events[len(events)-1]
	var meta domain.Meta
	var added merchant.DashboardUserAdded
	_ = json.Unmarshal(last.Metadata, &meta)
	_ = json.Unmarshal(last.Data, &added)
	if last.Type != "merchant.dashboard_user_added" || meta.Actor != "operator" || added.Role != "owner" ||
		!strings.Contains(out, "user "+added.UserID+" ") {
		t.Fatalf("recorded %s %+v %+v; the command said %s", last.Type, meta, added, out)
	}
}

// TestDashboardUserCreateSealsPlainEmailsFirst: on a database where an
// earlier version kept a user's email in plain text, the operator's
// dashboard-user create seals it before it looks the address up, so the
// address is still taken.
func TestDashboardUserCreateSealsPlainEmailsFirst(t *testing.T) {
	db := pgtest.NewURL(t)
	merchantID := cliMerchant(t, db, "Acme")
	if _, err := cli(t, db, "dashboard-user", "create", "--merchant", merchantID, "--email", "ada@shop.example", "--role", "owner"); err != nil {
		t.Fatal(err)
	}
	env := testEnv(t, db)
	ctx := context.Background()
	if _, err := env.Pool.Exec(ctx, `UPDATE dashboard_users SET email = 'Ada@Shop.example', email_sealed = NULL, email_index = NULL`); err != nil {
		t.Fatal(err)
	}
	if _, err := cli(t, db, "dashboard-user", "create", "--merchant", merchantID, "--email", "ada@shop.example", "--role", "viewer"); err == nil ||
		!strings.Contains(err.Error(), dashauth.ErrEmailTaken.Error()) {
		t.Fatalf("the address an earlier version kept was given again: %v", err)
	}
	var plain int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM dashboard_users WHERE email IS NOT NULL OR email_sealed IS NULL`).Scan(&plain); err != nil || plain != 0 {
		t.Fatalf("%d users' emails left unsealed (%v)", plain, err)
	}
}
