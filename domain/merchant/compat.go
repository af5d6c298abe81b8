package merchant

import (
	"maps"

	"github.com/escrowd/escrowd/domain"
)

// Profile is a merchant's compatibility profile: which conventions its
// webhooks follow. ProfileNone is the service's own; ProfilePayluk the
// public escrow API's, so a migrating merchant's webhook handlers verify
// deliveries unchanged (the signature also under x-payluk-signature, the
// public API's User-Agent, signed with the merchant's super-admin key of
// the environment, as the public API signs with the secret key). The
// webhooks package maps a profile to headers.
type Profile string

const (
	ProfileNone   Profile = "none"
	ProfilePayluk Profile = "payluk"
)

// ParseProfile reads a profile's name.
func ParseProfile(s string) (Profile, error) {
	switch p := Profile(s); p {
	case ProfileNone, ProfilePayluk:
		return p, nil
	}
	return "", domain.Invalidf("the compatibility profile must be payluk or none")
}

// CompatSet switches the merchant's profile. SigningSecrets are the
// signing secrets the switch makes current, per environment (the
// super-admin keys for ProfilePayluk; none for ProfileNone, which keeps
// the secrets in force).
type CompatSet struct {
	Profile        Profile                       `json:"profile"`
	SigningSecrets map[domain.Environment]string `json:"signingSecrets,omitempty"`
}

func (CompatSet) EventType() string { return "merchant.compat_set" }

func applyCompat(s State, e CompatSet) State {
	s.Compat = e.Profile
	if len(e.SigningSecrets) > 0 {
		s.SigningSecrets = maps.Clone(s.SigningSecrets)
		maps.Copy(s.SigningSecrets, e.SigningSecrets)
		// A secret replaced by the switch stops at once, as after a
		// rotation without an overlap.
		s.Overlaps = maps.Clone(s.Overlaps)
		for env := range e.SigningSecrets {
			delete(s.Overlaps, env)
		}
	}
	return s
}

// SetCompat decides switching the merchant to profile p. ProfilePayluk
// needs the secret of both environments (the merchant's super-admin keys,
// which only their issuer holds in plain text); switching to the profile
// in force with the secrets in force records nothing.
func SetCompat(s State, p Profile, secrets map[domain.Environment]string) ([]domain.Event, error) {
	if !s.Exists() {
		return nil, domain.Errorf(domain.NotFound, "Merchant not found")
	}
	if _, err := ParseProfile(string(p)); err != nil {
		return nil, err
	}
	ev := CompatSet{Profile: p}
	if p == ProfilePayluk {
		for _, env := range []domain.Environment{domain.Test, domain.Live} {
			if len(secrets[env]) < MinSigningSecretLength {
				return nil, domain.Invalidf("the payluk profile needs a super-admin key of each environment")
			}
		}
		ev.SigningSecrets = maps.Clone(secrets)
	}
	if s.Profile() == p && (p != ProfilePayluk || maps.Equal(s.SigningSecrets, secrets)) {
		return nil, nil
	}
	return []domain.Event{ev}, nil
}

// Profile is the merchant's profile (ProfileNone unless switched).
func (s State) Profile() Profile {
	if s.Compat == "" {
		return ProfileNone
	}
	return s.Compat
}
