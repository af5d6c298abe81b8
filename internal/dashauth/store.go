package dashauth

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/internal/keyring"
)

// User is one dashboard user as the pages see them.
type User struct {
	ID         string
	MerchantID string
	Email      string
	Role       Role
	// Active: the setup link was used (a password is set).
	Active        bool
	TOTPConfirmed bool
	LockedUntil   *time.Time
	CreatedAt     time.Time
	CreatedBy     string
}

// Session is a logged-in (or half logged-in) browser.
type Session struct {
	User User
	// Active: the user gave both their password and a TOTP code.
	Active bool
	// FormToken is the anti-forgery token of every form of the session.
	FormToken string
}

// Store keeps users and sessions in PostgreSQL (dashboard_users,
// dashboard_sessions). Login emails and TOTP secrets are sealed with the
// merchant's data key (keys), and emails are found by their blind index,
// so a read of the table, or a backup of it, names nobody and logs nobody
// in.
type Store struct {
	pool *pgxpool.Pool
	keys *keyring.Keyring
}

// NewStore returns the store over pool, sealing with keys; every call
// that writes or reads a user needs them (ErrNoKeyring without).
func NewStore(pool *pgxpool.Pool, keys *keyring.Keyring) *Store {
	return &Store{pool: pool, keys: keys}
}

// ErrNoKeyring answers a store made without a keyring.
var ErrNoKeyring = errors.New("dashauth: dashboard users need the master key (ESCROW_MASTER_KEY_FILE)")

// fieldAAD binds a sealed value to its column and its user: a sealed
// value copied to another user's row, or to another column, does not open.
func fieldAAD(column, userID string) []byte {
	return []byte("dashboard_users." + column + "\x00" + userID)
}

func (s *Store) sealField(ctx context.Context, column, merchantID, userID, plain string) ([]byte, error) {
	if s.keys == nil {
		return nil, ErrNoKeyring
	}
	return s.keys.Seal(ctx, keyring.Merchant(merchantID), []byte(plain), fieldAAD(column, userID))
}

func (s *Store) openField(ctx context.Context, column, merchantID, userID string, sealed []byte) (string, error) {
	if s.keys == nil {
		return "", ErrNoKeyring
	}
	plain, err := s.keys.Open(ctx, keyring.Merchant(merchantID), sealed, fieldAAD(column, userID))
	return string(plain), err
}

func (s *Store) sealTOTP(ctx context.Context, merchantID, userID, secret string) ([]byte, error) {
	return s.sealField(ctx, "totp_secret", merchantID, userID, secret)
}

func (s *Store) openTOTP(ctx context.Context, merchantID, userID string, sealed []byte) (string, error) {
	return s.openField(ctx, "totp_secret", merchantID, userID, sealed)
}

// EmailPurpose is the blind index purpose of dashboard users' login
// emails.
const EmailPurpose = "dashboard-email"

// emailIndex is the blind index of a login email: case and surrounding
// space do not make another login.
func (s *Store) emailIndex(ctx context.Context, email string) (string, error) {
	if s.keys == nil {
		return "", ErrNoKeyring
	}
	return s.keys.BlindIndex(ctx, EmailPurpose, strings.ToLower(strings.TrimSpace(email)))
}

// sealPlain seals the TOTP secret a user has in plain text (stored before
// secrets were sealed) into totp_sealed and clears the plain one. It
// returns that secret ("" when the user had none in plain text).
func (s *Store) sealPlain(ctx context.Context, userID string) (string, error) {
	var (
		merchantID string
		plain      *string
	)
	err := s.pool.QueryRow(ctx, `SELECT merchant_id, totp_secret FROM dashboard_users WHERE user_id = $1`, userID).Scan(&merchantID, &plain)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && plain == nil {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	sealed, err := s.sealTOTP(ctx, merchantID, userID, *plain)
	if err != nil {
		return "", err
	}
	// Only if it is still that secret: of two processes sealing it at once,
	// either's sealed copy is the same secret.
	if _, err := s.pool.Exec(ctx, `UPDATE dashboard_users SET totp_sealed = $2, totp_secret = NULL
		WHERE user_id = $1 AND totp_secret = $3`, userID, sealed, *plain); err != nil {
		return "", err
	}
	return *plain, nil
}

// SealPlainSecrets seals every TOTP secret and login email kept in plain
// text (by a version that did not seal them) and clears it: run at start,
// so that none stays readable after an upgrade. It returns how many users
// it sealed a secret of.
func (s *Store) SealPlainSecrets(ctx context.Context) (int, error) {
	if s.keys == nil {
		return 0, ErrNoKeyring
	}
	if err := s.sealPlainEmails(ctx); err != nil {
		return 0, err
	}
	rows, err := s.pool.Query(ctx, `SELECT user_id FROM dashboard_users WHERE totp_secret IS NOT NULL ORDER BY user_id`)
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		plain, err := s.sealPlain(ctx, id)
		if err != nil {
			return n, err
		}
		if plain != "" {
			n++
		}
	}
	return n, nil
}

// sealPlainEmails seals the login emails kept in plain text into
// email_sealed and email_index, and clears them.
func (s *Store) sealPlainEmails(ctx context.Context) error {
	type plainEmail struct{ id, merchantID, email string }
	rows, err := s.pool.Query(ctx, `SELECT user_id, merchant_id, email FROM dashboard_users WHERE email IS NOT NULL ORDER BY user_id`)
	if err != nil {
		return err
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (plainEmail, error) {
		var p plainEmail
		return p, r.Scan(&p.id, &p.merchantID, &p.email)
	})
	if err != nil {
		return err
	}
	for _, p := range found {
		sealed, err := s.sealField(ctx, "email", p.merchantID, p.id, p.email)
		if err != nil {
			return err
		}
		index, err := s.emailIndex(ctx, p.email)
		if err != nil {
			return err
		}
		if _, err := s.pool.Exec(ctx, `UPDATE dashboard_users SET email_sealed = $2, email_index = $3, email = NULL
			WHERE user_id = $1 AND email = $4`, p.id, sealed, index, p.email); err != nil {
			return err
		}
	}
	return nil
}

// ErrEmailTaken answers a user created with an email another user has.
var ErrEmailTaken = errors.New("a dashboard user with this email exists")

const userColumns = `user_id, merchant_id, email_sealed, role, password_hash IS NOT NULL, totp_confirmed, locked_until, created_at, created_by`

// scanUser reads a row of userColumns, its email opened.
func (s *Store) scanUser(ctx context.Context, row pgx.Row) (User, error) {
	var u User
	var role string
	var email []byte
	if err := row.Scan(&u.ID, &u.MerchantID, &email, &role, &u.Active, &u.TOTPConfirmed, &u.LockedUntil, &u.CreatedAt, &u.CreatedBy); err != nil {
		return u, err
	}
	u.Role = Role(role)
	return u, s.openEmail(ctx, &u, email)
}

// openEmail sets u's email from its sealed copy.
func (s *Store) openEmail(ctx context.Context, u *User, sealed []byte) error {
	if sealed == nil {
		return fmt.Errorf("dashauth: user %s has no sealed email (SealPlainSecrets has not run)", u.ID)
	}
	var err error
	u.Email, err = s.openField(ctx, "email", u.MerchantID, u.ID, sealed)
	return err
}

// CreateUser adds a user of merchantID and returns them with the token
// of their one-time setup link (only its digest is stored). createdBy is
// the user id of the owner who added them, or "operator". An address is
// found taken by its blind index, so the emails an earlier version kept in
// plain text must be sealed first (SealPlainSecrets, which serve runs at
// start).
func (s *Store) CreateUser(ctx context.Context, merchantID, email string, role Role, createdBy string, now time.Time) (User, string, error) {
	email = strings.TrimSpace(email)
	if !strings.Contains(email, "@") || len(email) > 254 {
		return User{}, "", errors.New("email must be an email address")
	}
	if rank[role] == 0 {
		return User{}, "", errors.New("role must be owner, support or viewer")
	}
	token := rand.Text() + rand.Text()
	id := "usr_" + strings.ToLower(rand.Text())
	sealed, err := s.sealField(ctx, "email", merchantID, id, email)
	if err != nil {
		return User{}, "", err
	}
	index, err := s.emailIndex(ctx, email)
	if err != nil {
		return User{}, "", err
	}
	u, err := s.scanUser(ctx, s.pool.QueryRow(ctx, `INSERT INTO dashboard_users
		(user_id, merchant_id, email_sealed, email_index, role, setup_digest, setup_expires_at, created_at, created_by)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING `+userColumns,
		id, merchantID, sealed, index, string(role), digest(token), now.Add(SetupValidFor), now, createdBy))
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return User{}, "", ErrEmailTaken
	}
	return u, token, err
}

// Users lists merchantID's users, oldest first.
func (s *Store) Users(ctx context.Context, merchantID string) ([]User, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+userColumns+` FROM dashboard_users WHERE merchant_id = $1 ORDER BY created_at, user_id`, merchantID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (User, error) { return s.scanUser(ctx, r) })
}

// SetupUser is the user whose setup link token is, while it is valid.
func (s *Store) SetupUser(ctx context.Context, token string, now time.Time) (User, error) {
	u, err := s.scanUser(ctx, s.pool.QueryRow(ctx, `SELECT `+userColumns+` FROM dashboard_users
		WHERE setup_digest = $1 AND setup_expires_at > $2`, digest(token), now))
	if errors.Is(err, pgx.ErrNoRows) {
		return User{}, ErrSetupUsed
	}
	return u, err
}

// CompleteSetup sets the password of the setup link's user and uses the
// link up, and starts a session at the password stage (the TOTP code
// comes next). It returns the session's cookie value.
func (s *Store) CompleteSetup(ctx context.Context, token, password string, now time.Time) (string, error) {
	hash := HashPassword(password)
	var id string
	err := s.pool.QueryRow(ctx, `UPDATE dashboard_users SET password_hash = $2, setup_digest = NULL, setup_expires_at = NULL,
		failed_attempts = 0, locked_until = NULL
		WHERE setup_digest = $1 AND setup_expires_at > $3 RETURNING user_id`, digest(token), hash, now).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrSetupUsed
	}
	if err != nil {
		return "", err
	}
	return s.newSession(ctx, s.pool, id, "password", now)
}

// CheckPassword logs in with email and password: it returns the cookie of
// a new session at the password stage. A locked user is refused before
// the password is looked at; a wrong password counts towards the lock.
func (s *Store) CheckPassword(ctx context.Context, email, password string, now time.Time) (string, error) {
	var (
		id     string
		hash   *string
		locked *time.Time
	)
	index, err := s.emailIndex(ctx, email)
	if err != nil {
		return "", err
	}
	err = s.pool.QueryRow(ctx, `SELECT user_id, password_hash, locked_until FROM dashboard_users WHERE email_index = $1`,
		index).Scan(&id, &hash, &locked)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && hash == nil) {
		PasswordMatches(dummyHash, password)
		return "", ErrBadCredentials
	}
	if err != nil {
		return "", err
	}
	if locked != nil && locked.After(now) {
		return "", ErrLocked
	}
	if !PasswordMatches(*hash, password) {
		return "", s.fail(ctx, id, now)
	}
	if err := s.succeed(ctx, id, now); err != nil {
		return "", err
	}
	return s.newSession(ctx, s.pool, id, "password", now)
}

// fail counts a wrong password or code; the MaxFailures-th in a row locks
// the user. It answers ErrBadCredentials, or ErrLocked for the one that
// locks.
func (s *Store) fail(ctx context.Context, userID string, now time.Time) error {
	var lockedNow bool
	err := s.pool.QueryRow(ctx, `UPDATE dashboard_users SET
			locked_until = CASE WHEN failed_attempts + 1 >= $2 THEN $3 ELSE locked_until END,
			failed_attempts = CASE WHEN failed_attempts + 1 >= $2 THEN 0 ELSE failed_attempts + 1 END
		WHERE user_id = $1 RETURNING locked_until IS NOT NULL AND locked_until = $3`,
		userID, MaxFailures, now.Add(LockFor)).Scan(&lockedNow)
	if err != nil {
		return err
	}
	if lockedNow {
		return ErrLocked
	}
	return ErrBadCredentials
}

// succeed clears the count of wrong attempts, unless a racing attempt
// locked the user meanwhile.
func (s *Store) succeed(ctx context.Context, userID string, now time.Time) error {
	tag, err := s.pool.Exec(ctx, `UPDATE dashboard_users SET failed_attempts = 0
		WHERE user_id = $1 AND (locked_until IS NULL OR locked_until <= $2)`, userID, now)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return ErrLocked
	}
	return nil
}

type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func (s *Store) newSession(ctx context.Context, q querier, userID, stage string, now time.Time) (string, error) {
	id := rand.Text() + rand.Text() // 260 random bits
	_, err := q.Exec(ctx, `INSERT INTO dashboard_sessions (digest, user_id, stage, form_token, created_at, last_seen_at)
		VALUES ($1, $2, $3, $4, $5, $5)`, digest(id), userID, stage, rand.Text()+rand.Text(), now)
	return id, err
}

// Session returns the session of cookie, and marks it used at now. A
// session idle for IdleTimeout is ErrNoSession. A lock stops logins, not
// the sessions already open: wrong guesses by someone else must not log
// the user out.
func (s *Store) Session(ctx context.Context, cookie string, now time.Time) (Session, error) {
	if cookie == "" {
		return Session{}, ErrNoSession
	}
	var (
		ses   Session
		stage string
		role  string
		email []byte
	)
	u := &ses.User
	err := s.pool.QueryRow(ctx, `UPDATE dashboard_sessions se SET last_seen_at = $2
		FROM dashboard_users u
		WHERE se.digest = $1 AND u.user_id = se.user_id AND se.last_seen_at > $3
		RETURNING se.stage, se.form_token, u.user_id, u.merchant_id, u.email_sealed, u.role, u.password_hash IS NOT NULL,
		  u.totp_confirmed, u.locked_until, u.created_at, u.created_by`,
		digest(cookie), now, now.Add(-IdleTimeout)).Scan(&stage, &ses.FormToken, &u.ID, &u.MerchantID, &email, &role, &u.Active,
		&u.TOTPConfirmed, &u.LockedUntil, &u.CreatedAt, &u.CreatedBy)
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, ErrNoSession
	}
	if err != nil {
		return Session{}, err
	}
	u.Role, ses.Active = Role(role), stage == "active"
	return ses, s.openEmail(ctx, u, email)
}

// End deletes the session of cookie (logging out).
func (s *Store) End(ctx context.Context, cookie string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM dashboard_sessions WHERE digest = $1`, digest(cookie))
	return err
}

// PendingTOTPSecret is the secret a user at the password stage is to add
// to their authenticator: made once and kept (sealed) until a code
// confirms it.
func (s *Store) PendingTOTPSecret(ctx context.Context, u User) (string, error) {
	if u.TOTPConfirmed {
		return "", errors.New("the user's TOTP secret is confirmed")
	}
	// A secret shown before secrets were sealed stays the one to add: the
	// user may have added it already.
	if _, err := s.sealPlain(ctx, u.ID); err != nil {
		return "", err
	}
	k, err := NewTOTPKey(u.Email)
	if err != nil {
		return "", err
	}
	fresh, err := s.sealTOTP(ctx, u.MerchantID, u.ID, k.Secret())
	if err != nil {
		return "", err
	}
	var sealed []byte
	if err := s.pool.QueryRow(ctx, `UPDATE dashboard_users SET totp_sealed = COALESCE(totp_sealed, $2)
		WHERE user_id = $1 AND NOT totp_confirmed RETURNING totp_sealed`, u.ID, fresh).Scan(&sealed); err != nil {
		return "", err
	}
	return s.openTOTP(ctx, u.MerchantID, u.ID, sealed)
}

// CheckCode finishes logging in: with the right TOTP code (one not used
// before) the password-stage session of cookie is replaced by an active
// one, whose cookie it returns. The first right code also confirms the
// user's TOTP secret. A wrong code counts towards the lock.
func (s *Store) CheckCode(ctx context.Context, cookie, code string, now time.Time) (string, error) {
	var (
		userID, merchantID string
		plain              *string
		sealed             []byte
		last               int64
		locked             *time.Time
	)
	err := s.pool.QueryRow(ctx, `SELECT u.user_id, u.merchant_id, u.totp_secret, u.totp_sealed, u.totp_last_step, u.locked_until
		FROM dashboard_sessions se JOIN dashboard_users u USING (user_id)
		WHERE se.digest = $1 AND se.stage = 'password' AND se.last_seen_at > $2`, digest(cookie), now.Add(-IdleTimeout)).
		Scan(&userID, &merchantID, &plain, &sealed, &last, &locked)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNoSession
	}
	if err != nil {
		return "", err
	}
	if locked != nil && locked.After(now) {
		return "", ErrLocked
	}
	secret := ""
	switch {
	case plain != nil: // kept before secrets were sealed: sealed now
		if secret, err = s.sealPlain(ctx, userID); err != nil {
			return "", err
		}
		if secret == "" { // sealed meanwhile by another process
			secret = *plain
		}
	case sealed != nil:
		if secret, err = s.openTOTP(ctx, merchantID, userID, sealed); err != nil {
			return "", err
		}
	}
	step, ok := int64(0), false
	if secret != "" {
		step, ok = matchStep(secret, strings.TrimSpace(code), now)
	}
	if !ok || step <= last {
		return "", s.fail(ctx, userID, now)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx)
	// The step recorded only if still newer: of two racing uses of one
	// code, one logs in.
	tag, err := tx.Exec(ctx, `UPDATE dashboard_users SET totp_last_step = $2, totp_confirmed = true, failed_attempts = 0
		WHERE user_id = $1 AND totp_last_step < $2 AND (locked_until IS NULL OR locked_until <= $3)`, userID, step, now)
	if err != nil {
		return "", err
	}
	if tag.RowsAffected() == 0 {
		return "", ErrBadCredentials
	}
	tag, err = tx.Exec(ctx, `DELETE FROM dashboard_sessions WHERE digest = $1 AND stage = 'password'`, digest(cookie))
	if err != nil {
		return "", err
	}
	if tag.RowsAffected() == 0 {
		return "", ErrNoSession
	}
	id, err := s.newSession(ctx, tx, userID, "active", now)
	if err != nil {
		return "", err
	}
	return id, tx.Commit(ctx)
}

// UserByID reads one user of merchantID (ok false when there is none).
func (s *Store) UserByID(ctx context.Context, merchantID, id string) (User, bool, error) {
	u, err := s.scanUser(ctx, s.pool.QueryRow(ctx, `SELECT `+userColumns+` FROM dashboard_users WHERE merchant_id = $1 AND user_id = $2`, merchantID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return User{}, false, nil
	}
	return u, err == nil, err
}

// DeleteUser removes a user of merchantID and their sessions, and reports
// whether there was one.
func (s *Store) DeleteUser(ctx context.Context, merchantID, id string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM dashboard_users WHERE merchant_id = $1 AND user_id = $2`, merchantID, id)
	return err == nil && tag.RowsAffected() > 0, err
}

// Sweep deletes sessions idle past IdleTimeout.
func (s *Store) Sweep(ctx context.Context, now time.Time) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM dashboard_sessions WHERE last_seen_at <= $1`, now.Add(-IdleTimeout))
	return err
}
