package dashauth_test

import (
	"context"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/internal/dashauth"
	"github.com/escrowd/escrowd/internal/keyring"
)

// rawUser is every column of a user's row as PostgreSQL prints it (bytea
// as hex).
func (f fixture) rawUser(t *testing.T, id string) string {
	t.Helper()
	var raw string
	if err := f.pool.QueryRow(context.Background(), `SELECT row_to_json(u)::text FROM dashboard_users u WHERE user_id = $1`, id).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	return raw
}

// expectNoSecret fails when the user's row holds secret, as text or as
// the hex of its bytes.
func (f fixture) expectNoSecret(t *testing.T, id, secret string) {
	t.Helper()
	raw := f.rawUser(t, id)
	if strings.Contains(strings.ToUpper(raw), secret) || strings.Contains(strings.ToLower(raw), hex.EncodeToString([]byte(secret))) {
		t.Fatalf("the row of %s holds its TOTP secret: %s", id, raw)
	}
}

// logIn gives the password, then secret's code at at; it returns the
// active session's cookie.
func (f fixture) logIn(t *testing.T, email, secret string, at time.Time) (string, error) {
	t.Helper()
	ctx := context.Background()
	pending, err := f.st.CheckPassword(ctx, email, password, at)
	if err != nil {
		t.Fatal(err)
	}
	code, err := dashauth.TOTPCode(secret, at)
	if err != nil {
		t.Fatal(err)
	}
	return f.st.CheckCode(ctx, pending, code, at)
}

// TestTOTPSecretIsSealedAtRest: after enrolment the table holds no TOTP
// secret, only its copy sealed with the merchant's data key for this
// field and user; the code still logs in, at enrolment and after it; a
// sealed secret moved to another user's row does not open.
func TestTOTPSecretIsSealedAtRest(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	f := newFixture(t)
	u, pending := f.newUser(t, "ada@example.com", now)
	ses, err := f.st.Session(ctx, pending, now)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := f.st.PendingTOTPSecret(ctx, ses.User)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := f.st.PendingTOTPSecret(ctx, ses.User); err != nil || again != secret {
		t.Fatalf("the pending secret changed between two visits (%v)", err)
	}
	f.expectNoSecret(t, u.ID, secret)
	var sealed []byte
	if err := f.pool.QueryRow(ctx, `SELECT totp_sealed FROM dashboard_users WHERE user_id = $1`, u.ID).Scan(&sealed); err != nil {
		t.Fatal(err)
	}
	got, err := f.keys.Open(ctx, keyring.Merchant("m1"), sealed, []byte("dashboard_users.totp_secret\x00"+u.ID))
	if err != nil || string(got) != secret {
		t.Fatalf("the sealed secret opens to %q (%v), want the secret shown", got, err)
	}
	code, _ := dashauth.TOTPCode(secret, now)
	if _, err := f.st.CheckCode(ctx, pending, code, now); err != nil {
		t.Fatalf("the enrolment's code: %v", err)
	}
	later := now.Add(time.Minute)
	if _, err := f.logIn(t, "ada@example.com", secret, later); err != nil {
		t.Fatalf("a login after enrolment: %v", err)
	}
	f.expectNoSecret(t, u.ID, secret)

	// Bola's row with Ada's sealed secret: it is bound to Ada.
	b, bPending := f.newUser(t, "bola@example.com", now)
	if _, err := f.pool.Exec(ctx, `UPDATE dashboard_users SET totp_sealed = $2 WHERE user_id = $1`, b.ID, sealed); err != nil {
		t.Fatal(err)
	}
	code, _ = dashauth.TOTPCode(secret, later)
	if cookie, err := f.st.CheckCode(ctx, bPending, code, later); err == nil || cookie != "" {
		t.Fatalf("Ada's sealed secret logged Bola in: %q %v", cookie, err)
	}
}

// TestPlainSecretsAreSealedOnUpgrade: the secrets an earlier version kept
// in plain text are sealed by SealPlainSecrets, and any left (written by
// an earlier server during the upgrade) at the user's next login; either
// way the user's authenticator still logs them in.
func TestPlainSecretsAreSealedOnUpgrade(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	f := newFixture(t)
	ada, _ := f.newUser(t, "ada@example.com", now)
	bola, _ := f.newUser(t, "bola@example.com", now)
	adaKey, _ := dashauth.NewTOTPKey("ada@example.com")
	bolaKey, _ := dashauth.NewTOTPKey("bola@example.com")
	plain := func(id, secret string) {
		t.Helper()
		if _, err := f.pool.Exec(ctx, `UPDATE dashboard_users SET totp_secret = $2, totp_confirmed = true WHERE user_id = $1`, id, secret); err != nil {
			t.Fatal(err)
		}
	}
	plain(ada.ID, adaKey.Secret())
	plain(bola.ID, bolaKey.Secret())
	if n, err := f.st.SealPlainSecrets(ctx); err != nil || n != 2 {
		t.Fatalf("sealed %d (%v), want 2", n, err)
	}
	if n, err := f.st.SealPlainSecrets(ctx); err != nil || n != 0 {
		t.Fatalf("sealed %d again (%v)", n, err)
	}
	f.expectNoSecret(t, ada.ID, adaKey.Secret())
	f.expectNoSecret(t, bola.ID, bolaKey.Secret())
	if _, err := f.logIn(t, "ada@example.com", adaKey.Secret(), now); err != nil {
		t.Fatalf("Ada after the upgrade: %v", err)
	}

	// A plain secret written after the sweep is sealed at the next login.
	plain(bola.ID, bolaKey.Secret())
	if _, err := f.logIn(t, "bola@example.com", bolaKey.Secret(), now); err != nil {
		t.Fatalf("Bola with a plain secret: %v", err)
	}
	f.expectNoSecret(t, bola.ID, bolaKey.Secret())
	if _, err := f.logIn(t, "bola@example.com", bolaKey.Secret(), now.Add(time.Minute)); err != nil {
		t.Fatalf("Bola after it was sealed: %v", err)
	}
}
