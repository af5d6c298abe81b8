package merchant

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
)

func TestSetCompat(t *testing.T) {
	created := Apply(State{}, Created{MerchantID: "m1", Name: "Shop", Country: "NG", CreatedAt: time.Unix(0, 0),
		SigningSecrets: map[domain.Environment]string{domain.Test: "whsec_t", domain.Live: "whsec_l"}})
	keys := map[domain.Environment]string{domain.Test: "sk_test_" + strings.Repeat("a", 40), domain.Live: "sk_live_" + strings.Repeat("b", 40)}
	payluk := Apply(created, CompatSet{Profile: ProfilePayluk, SigningSecrets: keys})
	for _, c := range []struct {
		name    string
		given   State
		p       Profile
		secrets map[domain.Environment]string
		want    []domain.Event
		wantErr string
	}{
		{"payluk with both keys", created, ProfilePayluk, keys, []domain.Event{CompatSet{Profile: ProfilePayluk, SigningSecrets: keys}}, ""},
		{"payluk without the live key", created, ProfilePayluk, map[domain.Environment]string{domain.Test: keys[domain.Test]}, nil,
			"the payluk profile needs a super-admin key of each environment"},
		{"payluk again with the same keys", payluk, ProfilePayluk, keys, nil, ""},
		{"none from payluk keeps the secrets", payluk, ProfileNone, nil, []domain.Event{CompatSet{Profile: ProfileNone}}, ""},
		{"none when none", created, ProfileNone, nil, nil, ""},
		{"unknown profile", created, "stripe", nil, nil, "the compatibility profile must be payluk or none"},
		{"no merchant", State{}, ProfileNone, nil, nil, "Merchant not found"},
	} {
		got, err := SetCompat(c.given, c.p, c.secrets)
		msg := ""
		if err != nil {
			msg = domain.ErrorMessage(err)
		}
		if msg != c.wantErr || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v %v, want %v %q", c.name, got, err, c.want, c.wantErr)
		}
	}
	if payluk.Profile() != ProfilePayluk || !reflect.DeepEqual(payluk.SigningSecrets, keys) || created.Profile() != ProfileNone {
		t.Fatalf("applied %+v", payluk)
	}
	back := Apply(payluk, CompatSet{Profile: ProfileNone})
	if back.Profile() != ProfileNone || !reflect.DeepEqual(back.SigningSecrets, keys) {
		t.Fatalf("none kept %+v", back)
	}
	if created.SigningSecrets[domain.Test] != "whsec_t" {
		t.Fatal("applying the profile changed the earlier state (copy-on-write)")
	}
}
