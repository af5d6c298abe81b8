package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/internal/wiring"
)

func clearProviderEnv(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://unused")
	for _, k := range []string{"ESCROW_PROVIDER_TEST", "ESCROW_PROVIDER_LIVE", "ESCROW_PAYSTACK_SECRET_KEY_TEST",
		"ESCROW_PAYSTACK_SECRET_KEY_TEST_FILE", "ESCROW_PAYSTACK_SECRET_KEY_LIVE", "ESCROW_PAYSTACK_SECRET_KEY_LIVE_FILE",
		"ESCROW_PAYSTACK_BASE_URL", "ESCROW_PAYSTACK_DVA_BANK"} {
		t.Setenv(k, "")
	}
}

func TestProviderConfigDefaults(t *testing.T) {
	clearProviderEnv(t)
	c, err := LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if c.Providers[domain.Test].Name != "builtin" {
		t.Fatalf("test provider %+v, want builtin", c.Providers[domain.Test])
	}
	if _, ok := c.Providers[domain.Live]; ok {
		t.Fatalf("live has a provider by default: %+v", c.Providers[domain.Live])
	}
	sets, err := wiring.Gateways(map[domain.Environment]wiring.Provider{domain.Test: {Name: "builtin"}})
	if err != nil || sets[domain.Test].Payouts == nil || sets[domain.Live].Payouts != nil {
		t.Fatalf("gateways %+v, %v", sets, err)
	}
}

func TestPaystackProviderConfig(t *testing.T) {
	clearProviderEnv(t)
	const key = "sk_live_0123456789abcdef"
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	if err := os.WriteFile(file, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ESCROW_PROVIDER_LIVE", "paystack")
	t.Setenv("ESCROW_PAYSTACK_SECRET_KEY_LIVE_FILE", file)
	t.Setenv("ESCROW_PAYSTACK_BASE_URL", "http://127.0.0.1:9/")
	c, err := LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	p := c.Providers[domain.Live]
	if p.Name != "paystack" || string(p.SecretKey) != key || p.BaseURL != "http://127.0.0.1:9" || p.DVABank != "wema-bank" {
		t.Fatalf("live provider %+v", p)
	}
	// However the configuration is printed, the key is not.
	raw, _ := json.Marshal(c)
	for _, out := range []string{fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), fmt.Sprintf("%s", p.SecretKey), string(raw)} {
		if strings.Contains(out, key) {
			t.Fatalf("the secret key is printed: %s", out)
		}
	}
	// A Paystack environment pays out through the provider.
	sets, err := wiring.Gateways(map[domain.Environment]wiring.Provider{domain.Live: {Name: "paystack", SecretKey: key, BaseURL: p.BaseURL}})
	if err != nil || sets[domain.Live].Payouts == nil || sets[domain.Live].Events == nil {
		t.Fatalf("gateways: %+v, %v", sets[domain.Live], err)
	}
}

func TestProviderConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"ESCROW_PROVIDER_TEST": "stripe"}, "ESCROW_PROVIDER_TEST must be builtin or paystack"},
		{map[string]string{"ESCROW_PROVIDER_LIVE": "builtin"}, "ESCROW_PROVIDER_LIVE must be paystack, or unset"},
		{map[string]string{"ESCROW_PROVIDER_TEST": "paystack"}, "ESCROW_PROVIDER_TEST=paystack needs ESCROW_PAYSTACK_SECRET_KEY_TEST (or ESCROW_PAYSTACK_SECRET_KEY_TEST_FILE)"},
		{map[string]string{"ESCROW_PAYSTACK_SECRET_KEY_LIVE": "sk", "ESCROW_PAYSTACK_SECRET_KEY_LIVE_FILE": "/nonexistent"},
			"set ESCROW_PAYSTACK_SECRET_KEY_LIVE or ESCROW_PAYSTACK_SECRET_KEY_LIVE_FILE, not both"},
		{map[string]string{"ESCROW_PAYSTACK_SECRET_KEY_TEST_FILE": "/nonexistent/key"}, "ESCROW_PAYSTACK_SECRET_KEY_TEST_FILE:"},
		{map[string]string{"ESCROW_PAYSTACK_BASE_URL": "api.paystack.co"}, "ESCROW_PAYSTACK_BASE_URL must be an http or https URL"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			clearProviderEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			if _, err := LoadConfig(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
