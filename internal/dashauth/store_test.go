package dashauth_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/internal/dashauth"
	"github.com/escrowd/escrowd/internal/keyring"
	"github.com/escrowd/escrowd/internal/pgtest"
)

const password = "correct horse battery staple"

// fixture is a store over a database of its own, with the keyring that
// seals its TOTP secrets.
type fixture struct {
	st   *dashauth.Store
	pool *pgxpool.Pool
	keys *keyring.Keyring
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	pool := pgtest.NewPool(t)
	m, err := keyring.GenerateMaster()
	if err != nil {
		t.Fatal(err)
	}
	keys := keyring.New(pool, m)
	return fixture{st: dashauth.NewStore(pool, keys), pool: pool, keys: keys}
}

// newUser creates a user, uses their setup link and returns the store,
// the user and the password-stage session's cookie.
func newUser(t *testing.T, now time.Time) (*dashauth.Store, dashauth.User, string) {
	t.Helper()
	f := newFixture(t)
	u, cookie := f.newUser(t, "Ada@Example.com", now)
	return f.st, u, cookie
}

// newUser creates a user of merchant m1 with email, uses their setup link
// and returns them and the password-stage session's cookie.
func (f fixture) newUser(t *testing.T, email string, now time.Time) (dashauth.User, string) {
	t.Helper()
	ctx := context.Background()
	st := f.st
	u, token, err := st.CreateUser(ctx, "m1", email, dashauth.Support, "operator", now)
	if err != nil {
		t.Fatal(err)
	}
	cookie, err := st.CompleteSetup(ctx, token, password, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CompleteSetup(ctx, token, password, now); !errors.Is(err, dashauth.ErrSetupUsed) {
		t.Fatalf("a setup link used twice: %v", err)
	}
	return u, cookie
}

func TestPasswordHashIsArgon2idAndSalted(t *testing.T) {
	a, b := dashauth.HashPassword(password), dashauth.HashPassword(password)
	if !strings.HasPrefix(a, "$argon2id$v=19$m=19456,t=2,p=1$") || a == b {
		t.Fatalf("hashes %q %q", a, b)
	}
	if !dashauth.PasswordMatches(a, password) || dashauth.PasswordMatches(a, password+"x") || dashauth.PasswordMatches("garbage", password) {
		t.Fatal("PasswordMatches is wrong")
	}
}

func TestLoginNeedsPasswordThenAFreshCode(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	st, u, pending := newUser(t, now)
	ses, err := st.Session(ctx, pending, now)
	if err != nil || ses.Active || ses.User.ID != u.ID {
		t.Fatalf("after the password: %+v %v", ses, err)
	}
	secret, err := st.PendingTOTPSecret(ctx, ses.User)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := st.PendingTOTPSecret(ctx, ses.User); again != secret {
		t.Fatal("the pending secret changed between two visits")
	}
	code, _ := dashauth.TOTPCode(secret, now)
	active, err := st.CheckCode(ctx, pending, code, now)
	if err != nil {
		t.Fatal(err)
	}
	if active == pending {
		t.Fatal("the active session kept the pre-login id")
	}
	if _, err := st.Session(ctx, pending, now); !errors.Is(err, dashauth.ErrNoSession) {
		t.Fatalf("the password-stage id still works: %v", err)
	}
	if ses, err := st.Session(ctx, active, now); err != nil || !ses.Active || !ses.User.TOTPConfirmed {
		t.Fatalf("active session %+v %v", ses, err)
	}
	// The same code again, in a second login: refused (used).
	second, err := st.CheckPassword(ctx, "ada@example.com", password, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CheckCode(ctx, second, code, now); !errors.Is(err, dashauth.ErrBadCredentials) {
		t.Fatalf("a used code: %v", err)
	}
	next, _ := dashauth.TOTPCode(secret, now.Add(30*time.Second))
	if _, err := st.CheckCode(ctx, second, next, now); err != nil {
		t.Fatalf("the next step's code: %v", err)
	}
}

func TestFiveWrongPasswordsLock(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	st, _, _ := newUser(t, now)
	for i := 1; i < dashauth.MaxFailures; i++ {
		if _, err := st.CheckPassword(ctx, "ada@example.com", "wrong", now); !errors.Is(err, dashauth.ErrBadCredentials) {
			t.Fatalf("attempt %d: %v", i, err)
		}
	}
	if _, err := st.CheckPassword(ctx, "ada@example.com", "wrong", now); !errors.Is(err, dashauth.ErrLocked) {
		t.Fatalf("fifth wrong password: %v", err)
	}
	if _, err := st.CheckPassword(ctx, "ada@example.com", password, now.Add(dashauth.LockFor-time.Second)); !errors.Is(err, dashauth.ErrLocked) {
		t.Fatalf("the right password while locked: %v", err)
	}
	if _, err := st.CheckPassword(ctx, "ada@example.com", password, now.Add(dashauth.LockFor+time.Second)); err != nil {
		t.Fatalf("after the lock: %v", err)
	}
}

func TestConcurrentWrongPasswordsLockOnce(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	st, _, _ := newUser(t, now)
	var wg sync.WaitGroup
	errs := make([]error, dashauth.MaxFailures)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = st.CheckPassword(ctx, "ada@example.com", "wrong", now) }()
	}
	wg.Wait()
	if _, err := st.CheckPassword(ctx, "ada@example.com", password, now); !errors.Is(err, dashauth.ErrLocked) {
		t.Fatalf("%d racing wrong passwords did not lock: %v (%v)", dashauth.MaxFailures, err, errs)
	}
}

func TestWrongCodesCountTowardsTheLock(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	st, _, pending := newUser(t, now)
	var err error
	for i := 0; i < dashauth.MaxFailures; i++ {
		_, err = st.CheckCode(ctx, pending, "000000", now)
	}
	if !errors.Is(err, dashauth.ErrLocked) {
		t.Fatalf("five wrong codes: %v", err)
	}
}

func TestIdleSessionEnds(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	st, _, pending := newUser(t, now)
	if _, err := st.Session(ctx, pending, now.Add(dashauth.IdleTimeout-time.Second)); err != nil {
		t.Fatal(err)
	}
	// Each use restarts the idle clock.
	if _, err := st.Session(ctx, pending, now.Add(2*dashauth.IdleTimeout-2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Session(ctx, pending, now.Add(3*dashauth.IdleTimeout)); !errors.Is(err, dashauth.ErrNoSession) {
		t.Fatalf("an idle session: %v", err)
	}
}

func TestSetupLinkExpires(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	st := newFixture(t).st
	_, token, err := st.CreateUser(ctx, "m1", "b@example.com", dashauth.Viewer, "operator", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CompleteSetup(ctx, token, password, now.Add(dashauth.SetupValidFor+time.Second)); !errors.Is(err, dashauth.ErrSetupUsed) {
		t.Fatalf("an expired link: %v", err)
	}
	if _, _, err := st.CreateUser(ctx, "m2", "B@example.com", dashauth.Viewer, "operator", now); !errors.Is(err, dashauth.ErrEmailTaken) {
		t.Fatalf("the same email twice: %v", err)
	}
}
