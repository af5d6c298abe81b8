// Package dashauth keeps the dashboard's users and sessions: Argon2id
// passwords, TOTP codes (RFC 6238), the one-time setup link, the lockout
// after wrong attempts and the idle expiry of sessions. It decides who is
// logged in and with which role; what a user may do with money is the
// application's, through the same commands as the API.
package dashauth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/crypto/argon2"
)

// Role is what a user may do. Each role may do everything the one before
// it may.
type Role string

const (
	// Viewer reads.
	Viewer Role = "viewer"
	// Support also resolves disputes, blocks customers and redelivers
	// webhooks.
	Support Role = "support"
	// Owner also manages keys, webhooks, the allowlist and users.
	Owner Role = "owner"
)

var rank = map[Role]int{Viewer: 1, Support: 2, Owner: 3}

// ParseRole reads a role's name.
func ParseRole(s string) (Role, error) {
	r := Role(strings.ToLower(strings.TrimSpace(s)))
	if rank[r] == 0 {
		return "", fmt.Errorf("role must be owner, support or viewer")
	}
	return r, nil
}

// Allows reports whether r may do what need may.
func (r Role) Allows(need Role) bool { return rank[r] > 0 && rank[r] >= rank[need] }

// The rules of logging in.
const (
	// MaxFailures wrong passwords or codes in a row lock the user for
	// LockFor.
	MaxFailures = 5
	LockFor     = 15 * time.Minute
	// IdleTimeout ends a session not used for that long.
	IdleTimeout = 30 * time.Minute
	// SetupValidFor is how long a setup link may be used.
	SetupValidFor = 72 * time.Hour
	// MinPasswordLength is the shortest password a user may choose.
	MinPasswordLength = 12
)

var (
	// ErrBadCredentials answers a wrong email, password or code alike.
	ErrBadCredentials = errors.New("The email, password or code is not right")
	// ErrLocked answers a locked user, whatever the password.
	ErrLocked = errors.New("Too many wrong attempts: this user is locked for 15 minutes")
	// ErrSetupUsed answers an unknown, used or expired setup link.
	ErrSetupUsed = errors.New("This setup link is not valid: it was used, has expired or never existed. Ask an owner for a new one")
	// ErrNoSession answers a request without a live session.
	ErrNoSession = errors.New("not logged in")
)

// Argon2id parameters: the OWASP baseline (19 MiB, 2 passes, 1 lane),
// which keeps a login near 50 ms of one core.
const (
	argonTime    = 2
	argonMemory  = 19 * 1024
	argonThreads = 1
	argonKeyLen  = 32
)

// HashPassword returns password's Argon2id hash in the PHC string format
// ($argon2id$v=19$m=…,t=…,p=…$salt$hash), salted with 16 random bytes.
func HashPassword(password string) string {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		panic(err)
	}
	key := argon2.IDKey([]byte(password), salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemory, argonTime, argonThreads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
}

// PasswordMatches checks password against a hash made by HashPassword
// (with whatever parameters it records), in constant time.
func PasswordMatches(hash, password string) bool {
	parts := strings.Split(hash, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false
	}
	var version int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false
	}
	var m, t uint32
	var p uint8
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p); err != nil || m == 0 || t == 0 || p == 0 {
		return false
	}
	salt, err := base64.RawStdEncoding.DecodeString(parts[4])
	if err != nil {
		return false
	}
	want, err := base64.RawStdEncoding.DecodeString(parts[5])
	if err != nil || len(want) == 0 {
		return false
	}
	got := argon2.IDKey([]byte(password), salt, t, m, p, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1
}

// dummyHash is checked against when no user has the email, so that an
// unknown address takes as long to refuse as a wrong password.
var dummyHash = HashPassword(rand.Text())

// CheckPasswordRules refuses a password too short to choose.
func CheckPasswordRules(password, confirm string) error {
	if len([]rune(password)) < MinPasswordLength {
		return fmt.Errorf("The password must be at least %d characters", MinPasswordLength)
	}
	if password != confirm {
		return errors.New("The two passwords differ")
	}
	return nil
}

// digest is the stored form of a session id or setup token.
func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
