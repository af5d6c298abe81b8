package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/webhooks"
)

// cliIn is cli with stdin as the command's standard input.
func cliIn(t *testing.T, dbURL, stdin string, args ...string) (string, string, error) {
	t.Helper()
	t.Setenv("DATABASE_URL", dbURL)
	t.Setenv("ESCROW_DATA_DIR", t.TempDir())
	var out, errOut bytes.Buffer
	err := runIO(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return out.String(), errOut.String(), err
}

// TestSetSigningSecretVerifiesADelivery: a merchant's
// own secret, piped to `merchant set-signing-secret`, signs the next
// delivery of `serve --role webhooks`, under every header name of
// ESCROW_WEBHOOK_SIGNATURE_HEADERS and with ESCROW_WEBHOOK_USER_AGENT. The
// secret appears in no output and no argument.
func TestSetSigningSecretVerifiesADelivery(t *testing.T) {
	db := pgtest.NewURL(t)
	m := cliCreatedMerchant(t, db, "Acme")
	// The secret the merchant's receiver already verifies with.
	const secret = "sk_test_Receiver0Already1Verifies2With3This"
	for _, tc := range []struct {
		name, stdin string
		args        []string
		err         string
	}{
		{"too short", "short-secret\n", nil, "at least 32 characters"},
		{"empty", "", nil, "pipe the secret"},
		{"as an argument", secret, []string{secret}, "not taken as an argument"},
		{"no environment", secret, []string{}, "--env is required"},
	} {
		args := []string{"merchant", "set-signing-secret", "--merchant", m.MerchantID}
		if tc.args == nil {
			args = append(args, "--env", "test")
		}
		args = append(args, tc.args...)
		stdout, stderr, err := cliIn(t, db, tc.stdin, args...)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Fatalf("%s: err %v, want %q", tc.name, err, tc.err)
		}
		if strings.Contains(stdout+stderr+err.Error(), "Verifies") {
			t.Fatalf("%s: the secret was echoed: %q %q %v", tc.name, stdout, stderr, err)
		}
	}
	stdout, stderr, err := cliIn(t, db, secret+"\r\n", "merchant", "set-signing-secret", "--merchant", m.MerchantID, "--env", "test")
	if err != nil {
		t.Fatal(err)
	}
	if stdout != "ok\n" || stderr != "" {
		t.Fatalf("set-signing-secret printed %q, %q", stdout, stderr)
	}

	type hit struct {
		event          string
		verified, both bool
		agent          string
	}
	var (
		mu   sync.Mutex
		hits []hit
	)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var env webhooks.Envelope
		_ = json.Unmarshal(body, &env)
		a, b := r.Header.Get("x-service-signature"), r.Header.Get("x-payluk-signature")
		mu.Lock()
		hits = append(hits, hit{event: env.Event, verified: webhooks.Verify(secret, body, b), both: a == b, agent: r.UserAgent()})
		mu.Unlock()
	}))
	defer rc.Close()
	t.Setenv("ESCROW_WEBHOOK_ALLOW_PRIVATE", "true") // the receiver is on loopback
	if _, err := cli(t, db, "merchant", "set-webhook", "--merchant", m.MerchantID, "--env", "test", "--url", rc.URL+"/hooks"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ESCROW_WEBHOOK_SIGNATURE_HEADERS", "x-service-signature, X-Payluk-Signature")
	t.Setenv("ESCROW_WEBHOOK_USER_AGENT", "Payluk-Webhooks/2.0")
	serveWebhooksThenTopUp(t, db, m.MerchantID)
	waitUntil(t, "the deposit webhook", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(hits) > 0
	})
	mu.Lock()
	got := hits[0]
	mu.Unlock()
	if got.event != "payment.deposit.success" || !got.verified || !got.both || got.agent != "Payluk-Webhooks/2.0" {
		t.Fatalf("delivery %+v", got)
	}
}

// TestWebhookSignatureHeadersConfig: names are validated, deduplicated as
// HTTP compares them, and default to x-service-signature.
func TestWebhookSignatureHeadersConfig(t *testing.T) {
	db := pgtest.ServerURL(t)
	for _, tc := range []struct {
		value string
		want  []string
		err   string
	}{
		{"", []string{"x-service-signature"}, ""},
		{"x-service-signature,x-payluk-signature", []string{"x-service-signature", "x-payluk-signature"}, ""},
		{" X-Sig , x-sig ,, x-other", []string{"x-sig", "x-other"}, ""},
		{"x sig", nil, "not a valid header name"},
		{"user-agent", nil, "cannot carry the signature"},
	} {
		t.Setenv("ESCROW_WEBHOOK_SIGNATURE_HEADERS", tc.value)
		c, err := LoadConfig()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("%q: err %v, want %q", tc.value, err, tc.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(c.WebhookSignatureHeaders) != fmt.Sprint(tc.want) {
			t.Fatalf("%q: %v %v, want %v", tc.value, c.WebhookSignatureHeaders, err, tc.want)
		}
	}
	t.Setenv("ESCROW_WEBHOOK_SIGNATURE_HEADERS", "")
	t.Setenv("ESCROW_WEBHOOK_USER_AGENT", "")
	if c := mustConfig(t, db); c.WebhookUserAgent != webhooks.UserAgent {
		t.Fatalf("default user agent %q", c.WebhookUserAgent)
	}
	t.Setenv("ESCROW_WEBHOOK_USER_AGENT", "bad\nagent")
	if _, err := LoadConfig(); err == nil {
		t.Fatal("a user agent with a line break accepted")
	}
}

// TestRotateSecretOverlap: `merchant rotate-secret --overlap` keeps the
// replaced secret signing until the overlap ends; an overlap past the
// maximum is refused.
func TestRotateSecretOverlap(t *testing.T) {
	db := pgtest.NewURL(t)
	m := cliCreatedMerchant(t, db, "Acme")
	if _, err := cli(t, db, "merchant", "rotate-secret", "--merchant", m.MerchantID, "--overlap", "721h"); err == nil || !strings.Contains(err.Error(), "overlap") {
		t.Fatalf("--overlap 721h: %v", err)
	}
	before := time.Now()
	secret, err := cli(t, db, "merchant", "rotate-secret", "--merchant", m.MerchantID, "--overlap", "24h")
	if err != nil {
		t.Fatal(err)
	}
	st, err := service(testEnv(t, db)).Merchant(context.Background(), m.MerchantID)
	if err != nil {
		t.Fatal(err)
	}
	o := st.Overlaps[domain.Test]
	if st.SigningSecrets[domain.Test] != strings.TrimSpace(secret) || o.Secret != m.SigningSecrets[domain.Test] ||
		o.Until.Before(before.Add(24*time.Hour)) || o.Until.After(time.Now().Add(24*time.Hour)) {
		t.Fatalf("after rotate-secret --overlap 24h: secret %q, overlap %+v", st.SigningSecrets[domain.Test], o)
	}
}
