package redact

import (
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/domain/wallet"
	"github.com/escrowd/escrowd/internal/app"
)

func TestRedactData(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		ev       domain.Event
		secrets  []string // must not appear in the export
		Redacted map[string]any
	}{
		{merchant.Created{MerchantID: "m1", Name: "Shop", Country: "NG", CreatedAt: now,
			SigningSecrets: map[domain.Environment]string{domain.Test: "whsec_test_abc", domain.Live: "whsec_live_xyz"}},
			[]string{"whsec_test_abc", "whsec_live_xyz"},
			map[string]any{"signingSecrets": map[string]any{"test": Redacted, "live": Redacted}}},
		{merchant.SigningSecretRotated{Environment: domain.Live, Secret: "whsec_new"}, []string{"whsec_new"},
			map[string]any{"secret": Redacted}},
		{merchant.CompatSet{Profile: merchant.ProfilePayluk, SigningSecrets: map[domain.Environment]string{
			domain.Test: "sk_test_compatkey", domain.Live: "sk_live_compatkey"}},
			[]string{"sk_test_compatkey", "sk_live_compatkey"},
			map[string]any{"signingSecrets": map[string]any{"test": Redacted, "live": Redacted}}},
		{merchant.KeyIssued{Key: merchant.Key{ID: "k1", Digest: "deadbeef", Hint: "sk_test_…abcd"}, IssuedAt: now}, []string{"deadbeef"},
			map[string]any{"digest": Redacted}},
		{customer.Created{CustomerID: "c1", Firstname: "Ada", BVN: "12345678901", CreatedAt: now}, []string{"12345678901"},
			map[string]any{"bvn": customer.MaskBVN("12345678901")}},
		{customer.Created{CustomerID: "c2", Firstname: "Ada", CreatedAt: now}, nil, nil}, // no BVN: nothing to mask
		{wallet.Posted{TransactionID: "t1", Main: 5000}, nil, nil},
		// No signing secrets (null): redaction hides values, it does not
		// turn null into an empty object.
		{merchant.Created{MerchantID: "m0", Name: "Old", Country: "NG", CreatedAt: now}, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.ev.EventType(), func(t *testing.T) {
			raw, err := json.Marshal(c.ev)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Data(c.ev.EventType(), raw)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range c.secrets {
				if strings.Contains(string(got), s) {
					t.Fatalf("%q survives redaction: %s", s, got)
				}
			}
			var want, have map[string]any
			if err := json.Unmarshal(raw, &want); err != nil {
				t.Fatal(err)
			}
			for k, v := range c.Redacted {
				want[k] = v
			}
			if err := json.Unmarshal(got, &have); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(have, want) {
				t.Fatalf("Redacted %s\nwant %v", got, want)
			}
			// An event type without rules is exported exactly as stored,
			// not re-encoded (key order, spacing, number forms kept).
			if _, ruled := Rules[c.ev.EventType()]; !ruled && string(got) != string(raw) {
				t.Fatalf("data without rules changed: %s, stored %s", got, raw)
			}
		})
	}
	// Stored data of other types passes through byte for byte, even where
	// it is not an object.
	for _, raw := range []string{`{"z":1, "a":2.50}`, `[1]`, `null`} {
		if got, err := Data("wallet.posted", json.RawMessage(raw)); err != nil || string(got) != raw {
			t.Fatalf("wallet.posted %s exported as %s (%v)", raw, got, err)
		}
	}
	if _, err := Data("merchant.created", json.RawMessage(`[1]`)); err == nil {
		t.Fatal("data that is not an object was passed through")
	}
}

// Every event field whose name says it holds a credential or a BVN must
// have a redaction rule, so a new one cannot leak through the export.
func TestExportRedactionsCoverTheDomain(t *testing.T) {
	sensitive := regexp.MustCompile(`(?i)secret|digest|bvn|password|private|mnemonic|token`)
	allowed := map[string]bool{"paymentToken": true} // a public link id, not a credential
	for _, reg := range app.Registries() {
		for typ, ctor := range reg {
			for _, name := range jsonFields(reflect.TypeOf(ctor()).Elem()) {
				if !sensitive.MatchString(name) || allowed[name] {
					continue
				}
				if _, ok := Rules[typ][name]; !ok {
					t.Errorf("%s.%s looks sensitive and has no export redaction", typ, name)
				}
			}
		}
	}
}

// jsonFields lists a struct's top-level JSON field names, embedded structs
// flattened as encoding/json does.
func jsonFields(typ reflect.Type) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	return out
}
