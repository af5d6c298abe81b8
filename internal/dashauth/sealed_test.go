package dashauth_test

import (
	"context"
	"encoding/hex"
	"errors"
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

// TestLoginEmailIsSealedAtRest: a user's row holds no email, only its
// copy sealed for this field and user and its blind index; the login form
// finds the user whatever the case and surrounding space of the address,
// and one address is one login across merchants. An email an earlier
// version kept in plain text is sealed on upgrade and still logs in.
func TestLoginEmailIsSealedAtRest(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	f := newFixture(t)
	u, _ := f.newUser(t, "Ngozi.Staff@Example.com", now)
	if raw := f.rawUser(t, u.ID); strings.Contains(strings.ToLower(raw), "ngozi.staff") {
		t.Fatalf("the row holds the email: %s", raw)
	}
	if got, ok, err := f.st.UserByID(ctx, "m1", u.ID); err != nil || !ok || got.Email != "Ngozi.Staff@Example.com" {
		t.Fatalf("the user reads %+v, %v, %v", got, ok, err)
	}
	if _, err := f.st.CheckPassword(ctx, "  ngozi.staff@EXAMPLE.com ", password, now); err != nil {
		t.Fatalf("login with another case: %v", err)
	}
	if _, _, err := f.st.CreateUser(ctx, "m2", "ngozi.staff@example.com", dashauth.Viewer, "operator", now); !errors.Is(err, dashauth.ErrEmailTaken) {
		t.Fatalf("the address again, for another merchant: %v", err)
	}
	// A sealed email moved to another user's row does not open there.
	other, _ := f.newUser(t, "bola@example.com", now)
	if _, err := f.pool.Exec(ctx, `UPDATE dashboard_users SET email_sealed = (SELECT email_sealed FROM dashboard_users WHERE user_id = $1)
		WHERE user_id = $2`, u.ID, other.ID); err != nil {
		t.Fatal(err)
	}
	if got, _, err := f.st.UserByID(ctx, "m1", other.ID); err == nil {
		t.Fatalf("a moved sealed email opened as %q", got.Email)
	}

	// As an earlier version wrote it.
	if _, err := f.pool.Exec(ctx, `UPDATE dashboard_users SET email = 'Chidi@Example.com', email_sealed = NULL, email_index = NULL
		WHERE user_id = $1`, other.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.SealPlainSecrets(ctx); err != nil {
		t.Fatal(err)
	}
	if raw := f.rawUser(t, other.ID); strings.Contains(strings.ToLower(raw), "chidi") {
		t.Fatalf("the upgraded row holds the email: %s", raw)
	}
	if got, _, err := f.st.UserByID(ctx, "m1", other.ID); err != nil || got.Email != "Chidi@Example.com" {
		t.Fatalf("the upgraded user reads %+v (%v)", got, err)
	}
	if _, err := f.st.CheckPassword(ctx, "chidi@example.com", password, now); err != nil {
		t.Fatalf("login after the upgrade: %v", err)
	}
}
