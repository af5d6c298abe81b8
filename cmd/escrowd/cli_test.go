package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// cli runs the binary's entry point against a database, as an operator would.
func cli(t *testing.T, dbURL string, args ...string) (string, error) {
	t.Helper()
	t.Setenv("DATABASE_URL", dbURL)
	t.Setenv("ESCROW_DATA_DIR", t.TempDir())
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut)
	return out.String(), err
}

// testEnv opens the commands' environment on db (the event store, pool and
// projectors), closed when the test ends.
func testEnv(t *testing.T, db string) *cliEnv {
	t.Helper()
	env, closeEnv, err := openEnv(context.Background(), mustConfig(t, db), nopLogger(), io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeEnv)
	return env
}

func TestOperatorCommands(t *testing.T) {
	db := pgtest.NewURL(t)
	out, err := cli(t, db, "merchant", "create", "--name", "Acme", "--business", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		MerchantID string `json:"merchantId"`
		Keys       []struct {
			KeyID, Key, Environment, Role string
		} `json:"keys"`
		SigningSecrets map[string]string `json:"signingSecrets"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if m.MerchantID == "" || len(m.Keys) != 4 || m.SigningSecrets["test"] == "" || m.SigningSecrets["live"] == "" {
		t.Fatalf("merchant create output %s", out)
	}
	roles := map[string]bool{}
	for _, k := range m.Keys {
		roles[k.Environment+"/"+k.Role] = strings.HasPrefix(k.Key, "sk_"+k.Environment+"_") && len(k.Key) >= len("sk_test_")+32
	}
	for _, want := range []string{"test/standard", "test/super_admin", "live/standard", "live/super_admin"} {
		if !roles[want] {
			t.Fatalf("missing or malformed %s key: %s", want, out)
		}
	}
	out, err = cli(t, db, "key", "create", "--merchant", m.MerchantID, "--env", "live", "--role", "super_admin")
	if err != nil || !strings.Contains(out, `"key":"sk_live_`) {
		t.Fatalf("key create: %v %s", err, out)
	}
	if _, err := cli(t, db, "key", "revoke", "--merchant", m.MerchantID, "--key-id", m.Keys[0].KeyID); err != nil {
		t.Fatal(err)
	}
	if _, err := cli(t, db, "key", "revoke", "--merchant", m.MerchantID, "--key-id", "nope"); err == nil || !strings.Contains(err.Error(), "Key not found") {
		t.Fatalf("revoke unknown key: %v", err)
	}
	if _, err := cli(t, db, "merchant", "set-allowlist", "--merchant", m.MerchantID, "--ips", "10.0.0.1,192.168.0.0/16"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli(t, db, "merchant", "set-allowlist", "--merchant", m.MerchantID, "--ips", "not-an-ip"); err == nil {
		t.Fatal("bad allowlist accepted")
	}
	if _, err := cli(t, db, "merchant", "set-fees", "--merchant", m.MerchantID, "--escrow-fee-bps", "300"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli(t, db, "merchant", "set-fees", "--merchant", m.MerchantID, "--escrow-fee-bps", "20000"); err == nil {
		t.Fatal("fee over 100% accepted")
	}
	if _, err := cli(t, db, "merchant", "set-webhook", "--merchant", m.MerchantID, "--env", "live", "--url", "http://example.com/hook"); err == nil ||
		!strings.Contains(err.Error(), "url must be a public http(s) address") {
		t.Fatalf("live http callback accepted: %v", err)
	}
	if _, err := cli(t, db, "merchant", "set-webhook", "--merchant", m.MerchantID, "--env", "live", "--url", "https://127.0.0.1/hook"); err == nil ||
		!strings.Contains(err.Error(), "url must be a public http(s) address") {
		t.Fatalf("live loopback callback accepted: %v", err)
	}
	// Test callbacks may not be local either, unless
	// the operator allows it.
	if _, err := cli(t, db, "merchant", "set-webhook", "--merchant", m.MerchantID, "--env", "test", "--url", "http://127.0.0.1:9000/hook"); err == nil ||
		!strings.Contains(err.Error(), "url must be a public http(s) address") {
		t.Fatalf("test loopback callback accepted: %v", err)
	}
	t.Setenv("ESCROW_WEBHOOK_ALLOW_PRIVATE", "true")
	if _, err := cli(t, db, "merchant", "set-webhook", "--merchant", m.MerchantID, "--env", "test", "--url", "http://127.0.0.1:9000/hook"); err != nil {
		t.Fatal(err)
	}
	secret, err := cli(t, db, "merchant", "rotate-secret", "--merchant", m.MerchantID, "--env", "test")
	if err != nil || !strings.HasPrefix(secret, "whsec_") || strings.TrimSpace(secret) == m.SigningSecrets["test"] {
		t.Fatalf("rotate-secret: %v %q", err, secret)
	}
	if _, err := cli(t, db, "merchant", "set-fees", "--merchant", "unknown", "--escrow-fee-bps", "300"); err == nil {
		t.Fatal("unknown merchant accepted")
	}
	// Every change is in the read models when the commands return.
	env := testEnv(t, db)
	var revoked bool
	var allow []string
	var fees, hook string
	if err := env.Pool.QueryRow(context.Background(), `SELECT revoked FROM rm_api_keys WHERE key_id = $1`, m.Keys[0].KeyID).Scan(&revoked); err != nil || !revoked {
		t.Fatalf("revocation not projected: %v", err)
	}
	if err := env.Pool.QueryRow(context.Background(), `SELECT allowlist, fees::text, webhook_test FROM rm_merchants WHERE merchant_id = $1`, m.MerchantID).
		Scan(&allow, &fees, &hook); err != nil {
		t.Fatal(err)
	}
	if len(allow) != 2 || !strings.Contains(fees, `"escrowFeeBps": 300`) || hook != "http://127.0.0.1:9000/hook" {
		t.Fatalf("merchant read model: %v %s %s", allow, fees, hook)
	}
	// The signing secret is the merchant's, read from its events; the read
	// models keep no copy of it.
	if st, err := service(env).Merchant(context.Background(), m.MerchantID); err != nil || st.SigningSecrets["test"] != strings.TrimSpace(secret) {
		t.Fatalf("rotated secret %v", err)
	}
	var copies int
	if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM information_schema.columns WHERE table_name = 'rm_merchants' AND column_name LIKE 'secret%'`).
		Scan(&copies); err != nil || copies != 0 {
		t.Fatalf("rm_merchants has %d secret columns (%v)", copies, err)
	}
	status, err := cli(t, db, "projections", "status", "--json")
	if err != nil || !strings.Contains(status, "merchants") || !strings.Contains(status, "customers") {
		t.Fatalf("projections status: %v %s", err, status)
	}
}

func mustConfig(t *testing.T, db string) Config {
	t.Helper()
	t.Setenv("DATABASE_URL", db)
	c, err := LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func nopLogger() *zap.Logger { return zap.NewNop() }

// cliMerchant creates a merchant named name through `merchant create`
// (with extra flags) and returns its id.
func cliMerchant(t *testing.T, db, name string, extra ...string) string {
	t.Helper()
	return cliCreatedMerchant(t, db, name, extra...).MerchantID
}

// cliCreatedMerchant is what `merchant create --json` (with extra flags)
// printed for a new merchant named name.
func cliCreatedMerchant(t *testing.T, db, name string, extra ...string) app.CreatedMerchant {
	t.Helper()
	out, err := cli(t, db, append([]string{"merchant", "create", "--name", name, "--json"}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	var m app.CreatedMerchant
	if err := json.Unmarshal([]byte(out), &m); err != nil || m.MerchantID == "" {
		t.Fatalf("merchant create printed %q: %v", out, err)
	}
	return m
}
