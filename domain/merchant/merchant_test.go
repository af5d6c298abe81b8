package merchant

import (
	"reflect"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/domaintest"
)

var now = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func created() Created {
	return Created{MerchantID: "m1", Name: "Shop", Country: "NG", CreatedAt: now,
		SigningSecrets: map[domain.Environment]string{domain.Test: "t", domain.Live: "l"}}
}

func fold(events ...domain.Event) State {
	var s State
	for _, e := range events {
		s = Apply(s, e)
	}
	return s
}

// Events read back from the store fold to exactly the state the decided
// events gave.
func TestRegistryRoundTrip(t *testing.T) {
	evs := []domain.Event{
		created(),
		KeyIssued{Key: Key{ID: "k1", Environment: domain.Test, Role: SuperAdmin, Digest: "d", Hint: "h"}, IssuedAt: now},
		KeyRevoked{KeyID: "k1", RevokedAt: now},
		WebhookURLSet{Environment: domain.Live, URL: "https://x.example/h"},
		SigningSecretRotated{Environment: domain.Test, Secret: "t2"},
		AllowlistSet{Entries: []string{"10.0.0.1"}},
		FeesSet{Fees: FeePolicy{EscrowFeeBps: 300}},
		CompatSet{Profile: ProfilePayluk, SigningSecrets: map[domain.Environment]string{domain.Test: "sk_t", domain.Live: "sk_l"}},
		CompatSet{Profile: ProfileNone},
		EscrowDefaultsSet{Defaults: EscrowDefaults{AutoRelease: true}},
		DashboardUserAdded{UserID: "usr_1", Role: "support", At: now},
		DashboardUserRemoved{UserID: "usr_1", At: now},
	}
	decoded := domaintest.RoundTrip(t, Registry, evs...)
	want, got := fold(evs...), fold(decoded...)
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("state from store %+v\nwant %+v", got, want)
	}
	if !got.Keys["k1"].Revoked || got.Webhooks[domain.Live] != "https://x.example/h" || got.SigningSecrets[domain.Test] != "sk_t" || got.Profile() != ProfileNone ||
		got.Fees.EscrowFeeBps != 300 || len(got.Allowlist) != 1 {
		t.Fatalf("state %+v", got)
	}
}

// A dashboard user's addition or removal is a record of who did it: the
// merchant folds to the state it had.
func TestDashboardUserEventsLeaveTheMerchantAsItWas(t *testing.T) {
	s := fold(created(), KeyIssued{Key: Key{ID: "k1", Environment: domain.Test, Role: Standard}})
	for _, ev := range []domain.Event{DashboardUserAdded{UserID: "usr_1", Role: "owner", At: now}, DashboardUserRemoved{UserID: "usr_1", At: now}} {
		if got := Apply(s, ev); !reflect.DeepEqual(got, s) {
			t.Errorf("%s changed the merchant: %+v", ev.EventType(), got)
		}
	}
}

// Apply never mutates the state it is given (cached states are shared).
func TestApplyCopiesOnWrite(t *testing.T) {
	s := fold(created(), KeyIssued{Key: Key{ID: "k1", Environment: domain.Test, Role: Standard}})
	_ = Apply(s, KeyRevoked{KeyID: "k1"})
	_ = Apply(s, SigningSecretRotated{Environment: domain.Test, Secret: "new"})
	_ = Apply(s, WebhookURLSet{Environment: domain.Test, URL: "u"})
	if s.Keys["k1"].Revoked || s.SigningSecrets[domain.Test] != "t" || s.Webhooks[domain.Test] != "" {
		t.Fatalf("Apply mutated its input: %+v", s)
	}
}

func TestDecisions(t *testing.T) {
	existing := fold(created(), KeyIssued{Key: Key{ID: "k1", Environment: domain.Test, Role: Standard}})
	revoked := Apply(existing, KeyRevoked{KeyID: "k1"})
	tests := []struct {
		name    string
		decide  func() ([]domain.Event, error)
		want    []domain.Event
		wantErr string
	}{
		{"create", func() ([]domain.Event, error) { return Create(State{}, created()) },
			[]domain.Event{func() Created { c := created(); c.Fees = DefaultFees; return c }()}, ""},
		{"create twice", func() ([]domain.Event, error) { return Create(existing, created()) }, nil, "Merchant already exists"},
		{"create without name", func() ([]domain.Event, error) { c := created(); c.Name = ""; return Create(State{}, c) }, nil, "name is required"},
		{"issue key", func() ([]domain.Event, error) {
			return IssueKey(existing, KeyIssued{Key: Key{ID: "k2", Environment: domain.Live, Role: SuperAdmin}})
		}, []domain.Event{KeyIssued{Key: Key{ID: "k2", Environment: domain.Live, Role: SuperAdmin}}}, ""},
		{"issue key, unknown merchant", func() ([]domain.Event, error) {
			return IssueKey(State{}, KeyIssued{Key: Key{Environment: domain.Test, Role: Standard}})
		}, nil, "Merchant not found"},
		{"issue key, bad environment", func() ([]domain.Event, error) {
			return IssueKey(existing, KeyIssued{Key: Key{Environment: "prod", Role: Standard}})
		}, nil, "environment must be test or live"},
		{"issue key, bad role", func() ([]domain.Event, error) {
			return IssueKey(existing, KeyIssued{Key: Key{Environment: domain.Test, Role: "root"}})
		}, nil, "role must be standard or super_admin"},
		{"issue key with an expiry", func() ([]domain.Event, error) {
			return IssueKey(existing, KeyIssued{Key: Key{ID: "k3", Environment: domain.Test, Role: Standard, ExpiresAt: now.Add(time.Hour)}, IssuedAt: now})
		}, []domain.Event{KeyIssued{Key: Key{ID: "k3", Environment: domain.Test, Role: Standard, ExpiresAt: now.Add(time.Hour)}, IssuedAt: now}}, ""},
		{"issue key expiring when issued", func() ([]domain.Event, error) {
			return IssueKey(existing, KeyIssued{Key: Key{ID: "k3", Environment: domain.Test, Role: Standard, ExpiresAt: now}, IssuedAt: now})
		}, nil, "a key must expire after it is issued"},
		{"revoke", func() ([]domain.Event, error) { return RevokeKey(existing, "k1", now) },
			[]domain.Event{KeyRevoked{KeyID: "k1", RevokedAt: now}}, ""},
		{"revoke again is a no-op", func() ([]domain.Event, error) { return RevokeKey(revoked, "k1", now) }, nil, ""},
		{"revoke unknown", func() ([]domain.Event, error) { return RevokeKey(existing, "nope", now) }, nil, "Key not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.decide()
			if tt.wantErr != "" {
				if domain.ErrorMessage(err) != tt.wantErr {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %#v, %v; want %#v", got, err, tt.want)
			}
		})
	}
}

func TestValidateFees(t *testing.T) {
	if err := ValidateFees(DefaultFees); err != nil {
		t.Fatal(err)
	}
	for _, f := range []FeePolicy{{EscrowFeeBps: -1}, {CommissionBps: 10001}, {VaultFeeBps: 20000}, {BankWithdrawalFee: -5}} {
		if ValidateFees(f) == nil {
			t.Errorf("%+v accepted", f)
		}
	}
}

func TestSetSigningSecret(t *testing.T) {
	m := fold(created())
	long := "sk_live_0123456789abcdefghijklmnopqrstuv" // a key used as the secret
	for _, tc := range []struct {
		name, secret string
		env          domain.Environment
		state        State
		want         []domain.Event
		err          string
	}{
		{name: "a key as the secret", secret: long, env: domain.Live, state: m,
			want: []domain.Event{SigningSecretRotated{Environment: domain.Live, Secret: long}}},
		{name: "exactly 32", secret: "abcdefghijklmnopqrstuvwxyz012345", env: domain.Test, state: m,
			want: []domain.Event{SigningSecretRotated{Environment: domain.Test, Secret: "abcdefghijklmnopqrstuvwxyz012345"}}},
		{name: "31 characters", secret: "abcdefghijklmnopqrstuvwxyz01234", env: domain.Test, state: m,
			err: "the signing secret must be at least 32 characters, got 31"},
		{name: "32 characters of 33 bytes counted as runes", secret: "é" + "bcdefghijklmnopqrstuvwxyz01234", env: domain.Test, state: m,
			err: "the signing secret must be at least 32 characters, got 31"},
		{name: "inner space", secret: "abcdefghijklmnop qrstuvwxyz0123456", env: domain.Test, state: m,
			err: "the signing secret must not contain whitespace or control characters"},
		{name: "trailing newline", secret: long + "\n", env: domain.Test, state: m,
			err: "the signing secret must not contain whitespace or control characters"},
		{name: "unknown environment", secret: long, env: "prod", state: m, err: "environment must be test or live"},
		{name: "no merchant", secret: long, env: domain.Test, err: "Merchant not found"},
		{name: "the secret in force", secret: long, env: domain.Live,
			state: Apply(m, SigningSecretRotated{Environment: domain.Live, Secret: long})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SetSigningSecret(tc.state, tc.env, tc.secret)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %#v %v, want %#v", got, err, tc.want)
			}
		})
	}
}

func TestRotateSigningSecretWithOverlap(t *testing.T) {
	m := fold(created())
	old := m.SigningSecrets[domain.Test]
	const next = "whsec_0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name    string
		overlap time.Duration
		secret  string
		wantErr string
	}{
		{"negative overlap", -time.Hour, next, "the overlap must be between 0 and 720h0m0s"},
		{"overlap too long", MaxSecretOverlap + time.Second, next, "the overlap must be between 0 and 720h0m0s"},
		{"short secret", time.Hour, "short", "the signing secret must be at least 32 characters"},
	} {
		if _, err := RotateSigningSecret(m, domain.Test, tc.secret, now, tc.overlap); domain.ErrorMessage(err) != tc.wantErr {
			t.Fatalf("%s: err %v, want %q", tc.name, err, tc.wantErr)
		}
	}
	evs, err := RotateSigningSecret(m, domain.Test, next, now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if want := (SigningSecretRotated{Environment: domain.Test, Secret: next, OverlapUntil: now.Add(24 * time.Hour)}); len(evs) != 1 || evs[0] != want {
		t.Fatalf("events %+v", evs)
	}
	overlapped := Apply(m, evs[0])
	if overlapped.SigningSecrets[domain.Test] != next || overlapped.Overlaps[domain.Test] != (SecretOverlap{Secret: old, Until: now.Add(24 * time.Hour)}) {
		t.Fatalf("state after the rotation %+v", overlapped)
	}
	if _, ok := overlapped.Overlaps[domain.Live]; ok {
		t.Fatal("the other environment has an overlap")
	}
	// A rotation without an overlap ends the one in force.
	plain, _ := RotateSigningSecret(overlapped, domain.Test, next+"x", now, 0)
	if s := Apply(overlapped, plain[0]); len(s.Overlaps) != 0 || s.SigningSecrets[domain.Test] != next+"x" {
		t.Fatalf("state after a plain rotation %+v", s)
	}
	if len(overlapped.Overlaps) != 1 {
		t.Fatal("Apply mutated its input")
	}
}
