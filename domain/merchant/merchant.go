// Package merchant is the merchant aggregate: the tenant that owns
// customers, escrows and wallets, with its API keys, webhook settings, IP
// allowlist and fee policy.
package merchant

import (
	"maps"
	"slices"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/escrowd/escrowd/domain"
)

// Role of an API key.
type Role string

const (
	Standard   Role = "standard"
	SuperAdmin Role = "super_admin"
)

// FeePolicy is the merchant's fee schedule, in basis points and kobo.
type FeePolicy struct {
	EscrowFeeBps        int64 `json:"escrowFeeBps"`        // 250 = 2.5 %
	CommissionBps       int64 `json:"commissionBps"`       // merchant share of the escrow fee
	VaultFeeBps         int64 `json:"vaultFeeBps"`         // platform fee on a vault pot
	VaultCommissionBps  int64 `json:"vaultCommissionBps"`  // merchant share of the vault fee
	BankWithdrawalFee   int64 `json:"bankWithdrawalFee"`   // kobo per bank payout
	CryptoWithdrawalFee int64 `json:"cryptoWithdrawalFee"` // kobo per crypto payout
}

// DefaultFees is the fee policy of a new merchant.
var DefaultFees = FeePolicy{
	EscrowFeeBps: 250, CommissionBps: 5000, VaultFeeBps: 250, VaultCommissionBps: 5000,
	BankWithdrawalFee: 5000, CryptoWithdrawalFee: 0,
}

// Key is an issued API key; only its SHA-256 digest is kept.
type Key struct {
	ID          string             `json:"keyId"`
	Environment domain.Environment `json:"environment"`
	Role        Role               `json:"role"`
	Digest      string             `json:"digest"` // hex SHA-256 of the key
	Hint        string             `json:"hint"`   // prefix and last 4 chars, for display
	Revoked     bool               `json:"revoked"`
	// ExpiresAt is when the key stops being accepted (zero: never).
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
}

// Expired reports whether the key is past its expiry at now.
func (k Key) Expired(now time.Time) bool { return !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt) }

// State is the folded merchant.
type State struct {
	ID             string
	Name           string
	Business       bool
	Country        string // ISO code
	Fees           FeePolicy
	Keys           map[string]Key
	Webhooks       map[domain.Environment]string
	SigningSecrets map[domain.Environment]string
	// Overlaps are the secrets replaced by a rotation with an overlap,
	// per environment: deliveries are signed with them too until then.
	Overlaps  map[domain.Environment]SecretOverlap
	Allowlist []string
	// Compat is the compatibility profile ("" until one is set: see
	// Profile).
	Compat Profile
	// EscrowDefaults fill what an escrow request leaves out (defaults.go).
	EscrowDefaults EscrowDefaults
	CreatedAt      time.Time
}

// SecretOverlap is a replaced signing secret still in use until Until.
type SecretOverlap struct {
	Secret string
	Until  time.Time
}

// Exists reports whether the merchant was created.
func (s State) Exists() bool { return s.ID != "" }

// Events.
type (
	Created struct {
		MerchantID     string                        `json:"merchantId"`
		Name           string                        `json:"name"`
		Business       bool                          `json:"business"`
		Country        string                        `json:"country"`
		Fees           FeePolicy                     `json:"fees"`
		SigningSecrets map[domain.Environment]string `json:"signingSecrets"`
		CreatedAt      time.Time                     `json:"createdAt"`
	}
	KeyIssued struct {
		Key
		IssuedAt time.Time `json:"issuedAt"`
	}
	KeyRevoked struct {
		KeyID     string    `json:"keyId"`
		RevokedAt time.Time `json:"revokedAt"`
	}
	WebhookURLSet struct {
		Environment domain.Environment `json:"environment"`
		URL         string             `json:"url"`
	}
	// SigningSecretRotated makes Secret the signing secret of Environment.
	// With OverlapUntil the secret it replaces keeps signing deliveries
	// beside it until then, so receivers can switch without a gap.
	SigningSecretRotated struct {
		Environment  domain.Environment `json:"environment"`
		Secret       string             `json:"secret"`
		OverlapUntil time.Time          `json:"overlapUntil,omitzero"`
	}
	AllowlistSet struct {
		Entries []string `json:"entries"`
	}
	FeesSet struct {
		Fees FeePolicy `json:"fees"`
	}
)

func (Created) EventType() string              { return "merchant.created" }
func (KeyIssued) EventType() string            { return "merchant.key_issued" }
func (KeyRevoked) EventType() string           { return "merchant.key_revoked" }
func (WebhookURLSet) EventType() string        { return "merchant.webhook_url_set" }
func (SigningSecretRotated) EventType() string { return "merchant.signing_secret_rotated" }
func (AllowlistSet) EventType() string         { return "merchant.allowlist_set" }
func (FeesSet) EventType() string              { return "merchant.fees_set" }

// Registry decodes merchant events.
var Registry = domain.NewRegistry(
	func() domain.Event { return &Created{} },
	func() domain.Event { return &KeyIssued{} },
	func() domain.Event { return &KeyRevoked{} },
	func() domain.Event { return &WebhookURLSet{} },
	func() domain.Event { return &SigningSecretRotated{} },
	func() domain.Event { return &AllowlistSet{} },
	func() domain.Event { return &FeesSet{} },
	func() domain.Event { return &CompatSet{} },
	func() domain.Event { return &EscrowDefaultsSet{} },
	func() domain.Event { return &DashboardUserAdded{} },
	func() domain.Event { return &DashboardUserRemoved{} },
)

// Apply folds one event (copy-on-write: cached states are shared).
func Apply(s State, ev domain.Event) State {
	switch e := ev.(type) {
	case Created:
		s = State{ID: e.MerchantID, Name: e.Name, Business: e.Business, Country: e.Country, Fees: e.Fees,
			Keys: map[string]Key{}, Webhooks: map[domain.Environment]string{},
			SigningSecrets: maps.Clone(e.SigningSecrets), CreatedAt: e.CreatedAt}
	case KeyIssued:
		s.Keys = maps.Clone(s.Keys)
		s.Keys[e.ID] = e.Key
	case KeyRevoked:
		s.Keys = maps.Clone(s.Keys)
		k := s.Keys[e.KeyID]
		k.Revoked = true
		s.Keys[e.KeyID] = k
	case WebhookURLSet:
		s.Webhooks = maps.Clone(s.Webhooks)
		s.Webhooks[e.Environment] = e.URL
	case SigningSecretRotated:
		replaced := s.SigningSecrets[e.Environment]
		s.SigningSecrets = maps.Clone(s.SigningSecrets)
		s.SigningSecrets[e.Environment] = e.Secret
		s.Overlaps = maps.Clone(s.Overlaps)
		if !e.OverlapUntil.IsZero() && replaced != "" && replaced != e.Secret {
			if s.Overlaps == nil {
				s.Overlaps = map[domain.Environment]SecretOverlap{}
			}
			s.Overlaps[e.Environment] = SecretOverlap{Secret: replaced, Until: e.OverlapUntil}
		} else {
			delete(s.Overlaps, e.Environment)
		}
	case AllowlistSet:
		s.Allowlist = slices.Clone(e.Entries)
	case FeesSet:
		s.Fees = e.Fees
	case CompatSet:
		s = applyCompat(s, e)
	case EscrowDefaultsSet:
		s.EscrowDefaults = e.Defaults
	}
	return s
}

// Create decides the creation of a merchant.
func Create(s State, c Created) ([]domain.Event, error) {
	if s.Exists() {
		return nil, domain.Errorf(domain.Conflict, "Merchant already exists")
	}
	if c.Name == "" {
		return nil, domain.Invalidf("name is required")
	}
	if c.Fees == (FeePolicy{}) {
		c.Fees = DefaultFees
	}
	return []domain.Event{c}, nil
}

// IssueKey decides issuing a key.
func IssueKey(s State, k KeyIssued) ([]domain.Event, error) {
	if !s.Exists() {
		return nil, domain.Errorf(domain.NotFound, "Merchant not found")
	}
	if !k.Environment.Valid() {
		return nil, domain.Invalidf("environment must be test or live")
	}
	if k.Role != Standard && k.Role != SuperAdmin {
		return nil, domain.Invalidf("role must be standard or super_admin")
	}
	if !k.ExpiresAt.IsZero() && !k.ExpiresAt.After(k.IssuedAt) {
		return nil, domain.Invalidf("a key must expire after it is issued")
	}
	return []domain.Event{k}, nil
}

// RevokeKey decides revoking a key.
func RevokeKey(s State, keyID string, at time.Time) ([]domain.Event, error) {
	k, ok := s.Keys[keyID]
	if !ok {
		return nil, domain.Errorf(domain.NotFound, "Key not found")
	}
	if k.Revoked {
		return nil, nil
	}
	return []domain.Event{KeyRevoked{KeyID: keyID, RevokedAt: at}}, nil
}

// MaxSecretOverlap is the longest overlap a rotation may give the secret
// it replaces: long enough for any receiver's deployment, short enough
// that a secret believed replaced does not go on signing for long.
const MaxSecretOverlap = 30 * 24 * time.Hour

// RotateSigningSecret decides making secret the signing secret of env at
// at; with a positive overlap the replaced secret signs deliveries too
// until at+overlap.
func RotateSigningSecret(s State, env domain.Environment, secret string, at time.Time, overlap time.Duration) ([]domain.Event, error) {
	if !s.Exists() {
		return nil, domain.Errorf(domain.NotFound, "Merchant not found")
	}
	if !env.Valid() {
		return nil, domain.Invalidf("environment must be test or live")
	}
	if overlap < 0 || overlap > MaxSecretOverlap {
		return nil, domain.Invalidf("the overlap must be between 0 and %s", MaxSecretOverlap)
	}
	if len(secret) < MinSigningSecretLength {
		return nil, domain.Invalidf("the signing secret must be at least %d characters", MinSigningSecretLength)
	}
	ev := SigningSecretRotated{Environment: env, Secret: secret}
	if overlap > 0 {
		ev.OverlapUntil = at.Add(overlap)
	}
	return []domain.Event{ev}, nil
}

// MinSigningSecretLength is the shortest signing secret an operator may
// set: 32 characters, as long as the shortest key's random part.
const MinSigningSecretLength = 32

// SetSigningSecret decides making secret the signing secret of env: an
// operator keeps the secret a merchant's receivers already verify with
// . The secret is an HMAC key sent in no header, so any
// printable characters do; whitespace and control characters are refused
// because they are lost or changed when pasted or read as a line. Setting
// the secret in force records nothing.
func SetSigningSecret(s State, env domain.Environment, secret string) ([]domain.Event, error) {
	if !s.Exists() {
		return nil, domain.Errorf(domain.NotFound, "Merchant not found")
	}
	if !env.Valid() {
		return nil, domain.Invalidf("environment must be test or live")
	}
	if n := utf8.RuneCountInString(secret); n < MinSigningSecretLength {
		return nil, domain.Invalidf("the signing secret must be at least %d characters, got %d", MinSigningSecretLength, n)
	}
	for _, r := range secret {
		if r == utf8.RuneError || unicode.IsSpace(r) || unicode.IsControl(r) {
			return nil, domain.Invalidf("the signing secret must not contain whitespace or control characters")
		}
	}
	if s.SigningSecrets[env] == secret {
		return nil, nil
	}
	return []domain.Event{SigningSecretRotated{Environment: env, Secret: secret}}, nil
}

// ValidateFees checks a fee policy.
func ValidateFees(f FeePolicy) error {
	for name, v := range map[string]int64{"escrowFeeBps": f.EscrowFeeBps, "vaultFeeBps": f.VaultFeeBps} {
		if v < 0 || v > 10000 {
			return domain.Invalidf("%s must be between 0 and 10000", name)
		}
	}
	for name, v := range map[string]int64{"commissionBps": f.CommissionBps, "vaultCommissionBps": f.VaultCommissionBps} {
		if v < 0 || v > 10000 {
			return domain.Invalidf("%s must be between 0 and 10000", name)
		}
	}
	if f.BankWithdrawalFee < 0 || f.CryptoWithdrawalFee < 0 {
		return domain.Invalidf("withdrawal fees cannot be negative")
	}
	return nil
}
