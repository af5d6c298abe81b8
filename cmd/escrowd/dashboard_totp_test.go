package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/escrowd/escrowd/internal/dashauth"
	"github.com/escrowd/escrowd/internal/keyring"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// TestServeSealsPlainTOTPSecrets: the API role's dashboard, on a database
// where an earlier version kept a TOTP secret in plain text, seals it
// before serving; without a master key there is no dashboard.
func TestServeSealsPlainTOTPSecrets(t *testing.T) {
	db := pgtest.NewURL(t)
	keyFile := filepath.Join(t.TempDir(), "master.key")
	if err := keyring.CreateMasterFile(keyFile); err != nil {
		t.Fatal(err)
	}
	env := testEnv(t, db)
	ctx := context.Background()
	u, _, err := dashauth.NewStore(env.Pool, nil).CreateUser(ctx, "m1", "ada@example.com", dashauth.Owner, "operator", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, _ := dashauth.NewTOTPKey(u.Email)
	if _, err := env.Pool.Exec(ctx, `UPDATE dashboard_users SET totp_secret = $2, totp_confirmed = true WHERE user_id = $1`, u.ID, key.Secret()); err != nil {
		t.Fatal(err)
	}

	cfg := mustConfig(t, db)
	cfg.MasterKeyFile = ""
	if users, err := dashboardUsers(ctx, cfg, env); err != nil || users != nil {
		t.Fatalf("without a master key: %v %v", users, err)
	}
	cfg.MasterKeyFile = keyFile
	users, err := dashboardUsers(ctx, cfg, env)
	if err != nil || users == nil {
		t.Fatalf("with a master key: %v %v", users, err)
	}
	var plain int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM dashboard_users WHERE totp_secret IS NOT NULL OR totp_sealed IS NULL`).Scan(&plain); err != nil || plain != 0 {
		t.Fatalf("%d users' secrets left unsealed (%v)", plain, err)
	}
}
