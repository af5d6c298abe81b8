package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/domain/reference"
	"github.com/escrowd/escrowd/eventstore"
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// randomBase62 returns n uniformly random base62 characters.
func randomBase62(n int) string {
	out := make([]byte, n)
	buf := make([]byte, 1)
	for i := 0; i < n; {
		if _, err := rand.Read(buf); err != nil {
			panic(err)
		}
		if buf[0] < 248 { // 248 = 4*62: unbiased
			out[i] = base62[buf[0]%62]
			i++
		}
	}
	return string(out)
}

func newSecret() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return "whsec_" + hex.EncodeToString(b)
}

// IssuedKey is a key's plaintext, shown once.
type IssuedKey struct {
	KeyID       string             `json:"keyId"`
	Key         string             `json:"key"`
	Environment domain.Environment `json:"environment"`
	Role        merchant.Role      `json:"role"`
	// ExpiresAt is when the key stops being accepted (absent: never).
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
}

// CreatedMerchant is what `merchant create` prints.
type CreatedMerchant struct {
	MerchantID     string                        `json:"merchantId"`
	Keys           []IssuedKey                   `json:"keys"`
	SigningSecrets map[domain.Environment]string `json:"signingSecrets"`
	// Compat is the merchant's compatibility profile.
	Compat   merchant.Profile    `json:"compat"`
	Position eventstore.Position `json:"-"`
}

// KeyDigest is the stored form of an API key (hex SHA-256).
type KeyDigest func(string) string

// CreateMerchant creates a merchant with a standard and a super-admin key per
// environment and a signing secret per environment.
func (s *Service) CreateMerchant(ctx context.Context, name string, business bool, country string, digest KeyDigest) (CreatedMerchant, error) {
	return s.CreateMerchantWithProfile(ctx, name, business, country, digest, merchant.ProfileNone)
}

// CreateMerchantWithProfile is CreateMerchant with the compatibility
// profile p in force from the start (for ProfilePayluk the signing secret
// of each environment is its super-admin key, shown as both).
func (s *Service) CreateMerchantWithProfile(ctx context.Context, name string, business bool, country string, digest KeyDigest,
	p merchant.Profile) (CreatedMerchant, error) {
	if _, err := merchant.ParseProfile(string(p)); err != nil {
		return CreatedMerchant{}, err
	}
	if country == "" {
		country = "NG"
	}
	c, ok := reference.FindCountry(country)
	if !ok {
		return CreatedMerchant{}, domain.Invalidf("Invalid country selected")
	}
	id := s.newID()
	now := s.Engine.Now()
	out := CreatedMerchant{MerchantID: id, SigningSecrets: map[domain.Environment]string{domain.Test: newSecret(), domain.Live: newSecret()}}
	var events []domain.Event
	created, err := merchant.Create(merchant.State{}, merchant.Created{MerchantID: id, Name: name, Business: business,
		Country: c.ISOCode, SigningSecrets: out.SigningSecrets, CreatedAt: now})
	if err != nil {
		return out, err
	}
	events = append(events, created...)
	superAdmin := map[domain.Environment]string{}
	for _, env := range []domain.Environment{domain.Test, domain.Live} {
		for _, role := range []merchant.Role{merchant.Standard, merchant.SuperAdmin} {
			k := s.newKey(env, role, digest)
			out.Keys = append(out.Keys, k.plain)
			events = append(events, k.event)
			if role == merchant.SuperAdmin {
				superAdmin[env] = k.plain.Key
			}
		}
	}
	out.Compat = merchant.ProfileNone
	if p == merchant.ProfilePayluk {
		compat, err := merchant.SetCompat(merchant.Apply(merchant.State{}, created[0]), p, superAdmin)
		if err != nil {
			return out, err
		}
		events = append(events, compat...)
		out.SigningSecrets, out.Compat = superAdmin, p
	}
	res, err := s.Engine.Do(ctx, Actor{MerchantID: id}.meta(), func(tx *Tx) error {
		Record(tx, MerchantKind, id, events...)
		return nil
	})
	out.Position = res.Position
	return out, err
}

type newKey struct {
	plain IssuedKey
	event merchant.KeyIssued
}

func (s *Service) newKey(env domain.Environment, role merchant.Role, digest KeyDigest) newKey {
	key := "sk_" + string(env) + "_" + randomBase62(40)
	id := "key_" + s.newID()
	return newKey{
		plain: IssuedKey{KeyID: id, Key: key, Environment: env, Role: role},
		event: merchant.KeyIssued{Key: merchant.Key{ID: id, Environment: env, Role: role, Digest: digest(key),
			Hint: key[:len("sk_test_")+4] + "…" + key[len(key)-4:]}, IssuedAt: s.Engine.Now()},
	}
}

// IssueKey issues one more key, accepted for lifetime from now (zero:
// until it is revoked).
func (s *Service) IssueKey(ctx context.Context, merchantID string, env domain.Environment, role merchant.Role, digest KeyDigest,
	lifetime time.Duration) (IssuedKey, eventstore.Position, error) {
	if lifetime < 0 {
		return IssuedKey{}, eventstore.Position{}, domain.Invalidf("a key's lifetime must be positive")
	}
	k := s.newKey(env, role, digest)
	if lifetime > 0 {
		k.event.ExpiresAt = k.event.IssuedAt.Add(lifetime)
		k.plain.ExpiresAt = k.event.ExpiresAt
	}
	res, err := s.Engine.Do(ctx, Actor{MerchantID: merchantID}.meta(), func(tx *Tx) error {
		m, err := Read(tx, MerchantKind, merchantID)
		if err != nil {
			return err
		}
		events, err := merchant.IssueKey(m, k.event)
		if err != nil {
			return err
		}
		Record(tx, MerchantKind, merchantID, events...)
		return nil
	})
	return k.plain, res.Position, err
}

// UpdateMerchant applies an operator decision on a merchant.
func (s *Service) UpdateMerchant(ctx context.Context, merchantID string, decide func(merchant.State) ([]domain.Event, error)) (eventstore.Position, error) {
	return s.ChangeMerchant(ctx, Actor{MerchantID: merchantID}, decide)
}

// CompatChange is what switching a merchant's profile issued: for
// ProfilePayluk a new super-admin key per environment, each now also the
// signing secret of its environment (shown once).
type CompatChange struct {
	Compat   merchant.Profile    `json:"compat"`
	Keys     []IssuedKey         `json:"keys"`
	Position eventstore.Position `json:"-"`
}

// SetCompat switches merchantID's webhooks to profile p. Only digests of
// the existing keys are stored, so ProfilePayluk issues a super-admin key
// per environment and signs with it, the way the public escrow API signs
// with the secret key its merchants hold; the keys issued before stay
// valid. ProfileNone restores the service's own headers and keeps the
// signing secrets in force (rotate-secret replaces them).
func (s *Service) SetCompat(ctx context.Context, merchantID string, p merchant.Profile, digest KeyDigest) (CompatChange, error) {
	if _, err := merchant.ParseProfile(string(p)); err != nil {
		return CompatChange{}, err
	}
	out := CompatChange{Compat: p, Keys: []IssuedKey{}}
	var keys []merchant.KeyIssued
	secrets := map[domain.Environment]string{}
	if p == merchant.ProfilePayluk {
		for _, env := range []domain.Environment{domain.Test, domain.Live} {
			k := s.newKey(env, merchant.SuperAdmin, digest)
			out.Keys = append(out.Keys, k.plain)
			keys = append(keys, k.event)
			secrets[env] = k.plain.Key
		}
	}
	pos, err := s.UpdateMerchant(ctx, merchantID, func(m merchant.State) ([]domain.Event, error) {
		var events []domain.Event
		for _, k := range keys {
			issued, err := merchant.IssueKey(m, k)
			if err != nil {
				return nil, err
			}
			events = append(events, issued...)
		}
		compat, err := merchant.SetCompat(m, p, secrets)
		return append(events, compat...), err
	})
	out.Position = pos
	if len(keys) == 0 || err != nil {
		out.Keys = []IssuedKey{}
	}
	return out, err
}

// NewSigningSecret returns a fresh webhook signing secret.
func NewSigningSecret() string { return newSecret() }
