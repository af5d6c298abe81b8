package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/reference"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/webhooks"
)

func TestListenHandler(t *testing.T) {
	var out bytes.Buffer
	h := listenHandler("whsec_x", true, &out)
	body := []byte(`{"id":"m1","event":"escrow.created","data":{},"timestamp":"2026-01-01T00:00:00.000Z"}`)
	for _, tc := range []struct {
		sig    string
		status int
		line   string
	}{
		{webhooks.Sign("whsec_x", body), 200, "signature ok"},
		{webhooks.Sign("whsec_other", body), 401, "signature BAD"},
	} {
		out.Reset()
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		r.Header.Set(webhooks.SignatureHeader, tc.sig)
		r.Header.Set(webhooks.AttemptHeader, "2")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.status || !strings.Contains(out.String(), "escrow.created") || !strings.Contains(out.String(), "id=m1 attempt=2") ||
			!strings.Contains(out.String(), tc.line) || !strings.Contains(out.String(), `"data":{}`) {
			t.Fatalf("%d %q", w.Code, out.String())
		}
	}
	out.Reset()
	w := httptest.NewRecorder()
	listenHandler("", false, &out).ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body)))
	if w.Code != 200 || !strings.Contains(out.String(), "signature unchecked") {
		t.Fatalf("%d %q", w.Code, out.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServeWebhooksRole drives the operator path end to end: merchant
// create, set-webhook to `escrowd webhooks listen`, rotate-secret, `serve
// --role webhooks`; a top-up then reaches the listener signed with the
// rotated secret.
func TestServeWebhooksRole(t *testing.T) {
	db := pgtest.NewURL(t)
	t.Setenv("ESCROW_WEBHOOK_ALLOW_PRIVATE", "true") // the listener is on loopback
	m := cliCreatedMerchant(t, db, "Acme")
	port := freePort(t)
	if _, err := cli(t, db, "merchant", "set-webhook", "--merchant", m.MerchantID, "--env", "test",
		"--url", fmt.Sprintf("http://127.0.0.1:%d/", port)); err != nil {
		t.Fatal(err)
	}
	secret, err := cli(t, db, "merchant", "rotate-secret", "--merchant", m.MerchantID, "--env", "test")
	if err != nil {
		t.Fatal(err)
	}
	secret = strings.TrimSpace(secret)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var listened syncBuffer
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := run(ctx, []string{"webhooks", "listen", "--port", fmt.Sprint(port), "--secret", secret}, &listened, io.Discard); err != nil {
			t.Error(err)
		}
	}()
	t.Setenv("ESCROW_LOG_FORMAT", "console")
	serveWebhooksThenTopUp(t, db, m.MerchantID)
	waitUntil(t, "the listener to print the deposit", func() bool {
		return strings.Contains(listened.String(), "payment.deposit.success")
	})
	if s := listened.String(); !strings.Contains(s, "signature ok") || strings.Contains(s, "BAD") {
		t.Fatalf("listener output:\n%s", s)
	}
}

// serveWebhooks runs `serve --role webhooks` on db until the test ends
// and returns an environment on db once its subscriber is installed.
func serveWebhooks(t *testing.T, db string) *cliEnv {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := run(ctx, []string{"serve", "--role", "webhooks"}, io.Discard, io.Discard); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	env := testEnv(t, db)
	// The subscriber starts at the head of the log when first installed:
	// write only once it is.
	waitUntil(t, "the webhook subscriber", func() bool {
		var n int
		_ = env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM projection_checkpoints WHERE name = 'webhooks'`).Scan(&n)
		return n == 1
	})
	return env
}

// serveWebhooksThenTopUp runs serveWebhooks and tops up a new customer of
// the merchant: a payment.deposit.success webhook follows.
func serveWebhooksThenTopUp(t *testing.T, db, merchantID string) {
	t.Helper()
	svc := service(serveWebhooks(t, db))
	a := app.Actor{MerchantID: merchantID, Environment: domain.Test}
	cid, _, err := svc.CreateCustomer(context.Background(), a, customer.NewCustomer{Firstname: "Ada", Lastname: "Obi",
		Email: "ada@example.com", Phone: "08031234567"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.TopUp(context.Background(), a, cid, money.Naira(5000)); err != nil {
		t.Fatal(err)
	}
}

func TestWebhookRetentionConfig(t *testing.T) {
	db := pgtest.ServerURL(t)
	t.Setenv("ESCROW_WEBHOOK_RETENTION", "")
	if c := mustConfig(t, db); c.WebhookRetention != 720*time.Hour {
		t.Fatalf("default retention %s", c.WebhookRetention)
	}
	t.Setenv("ESCROW_WEBHOOK_RETENTION", "168h")
	if c := mustConfig(t, db); c.WebhookRetention != 168*time.Hour {
		t.Fatalf("retention %s", c.WebhookRetention)
	}
	for _, bad := range []string{"30d", "0", "-1h", "soon"} {
		t.Setenv("ESCROW_WEBHOOK_RETENTION", bad)
		if _, err := LoadConfig(); err == nil || !strings.Contains(err.Error(), "ESCROW_WEBHOOK_RETENTION") {
			t.Fatalf("%q: %v", bad, err)
		}
	}
}

// TestWebhookAllowPrivateConfig: ESCROW_WEBHOOK_ALLOW_PRIVATE (default
// false) reaches the HTTP layer and the operator commands; anything
// but a true value keeps private live callbacks refused.
func TestWebhookAllowPrivateConfig(t *testing.T) {
	db := pgtest.NewURL(t)
	for _, tc := range []struct {
		value string
		want  bool
	}{{"", false}, {"false", false}, {"0", false}, {"true", true}, {"1", true}, {"TRUE", true}} {
		t.Setenv("ESCROW_WEBHOOK_ALLOW_PRIVATE", tc.value)
		c := mustConfig(t, db)
		if c.WebhookAllowPriv != tc.want || httpConfig(c).WebhookAllowPrivate != tc.want {
			t.Fatalf("ESCROW_WEBHOOK_ALLOW_PRIVATE=%q: config %v, http %v; want %v", tc.value, c.WebhookAllowPriv,
				httpConfig(c).WebhookAllowPrivate, tc.want)
		}
	}
	t.Setenv("ESCROW_WEBHOOK_ALLOW_PRIVATE", "")
	os.Unsetenv("ESCROW_WEBHOOK_ALLOW_PRIVATE") // restored by t.Setenv
	if c := mustConfig(t, db); c.WebhookAllowPriv {
		t.Fatal("private live callbacks allowed by default")
	}
	for _, bad := range []string{"yes", "on", "maybe"} {
		t.Setenv("ESCROW_WEBHOOK_ALLOW_PRIVATE", bad)
		if c, err := LoadConfig(); err == nil && c.WebhookAllowPriv {
			t.Fatalf("ESCROW_WEBHOOK_ALLOW_PRIVATE=%q allows private callbacks", bad)
		}
	}
	t.Setenv("ESCROW_WEBHOOK_ALLOW_PRIVATE", "false")

	m := cliCreatedMerchant(t, db, "Acme")
	setLive := func(url string) error {
		_, err := cli(t, db, "merchant", "set-webhook", "--merchant", m.MerchantID, "--env", "live", "--url", url)
		return err
	}
	t.Setenv("ESCROW_WEBHOOK_ALLOW_PRIVATE", "false")
	if err := setLive("https://127.0.0.1:9443/hook"); err == nil || !strings.Contains(err.Error(), "url must be a public http(s) address") {
		t.Fatalf("loopback live callback without the setting: %v", err)
	}
	t.Setenv("ESCROW_WEBHOOK_ALLOW_PRIVATE", "true")
	if err := setLive("https://127.0.0.1:9443/hook"); err != nil {
		t.Fatalf("loopback live callback with the setting: %v", err)
	}
	if err := setLive("http://127.0.0.1:9443/hook"); err == nil || !strings.Contains(err.Error(), "url must be a public http(s) address") {
		t.Fatalf("the setting must not lift the https rule on live: %v", err)
	}
	var hook string
	if err := testEnv(t, db).Pool.QueryRow(context.Background(), `SELECT webhook_live FROM rm_merchants WHERE merchant_id = $1`, m.MerchantID).
		Scan(&hook); err != nil || hook != "https://127.0.0.1:9443/hook" {
		t.Fatalf("live callback %q %v", hook, err)
	}
}

// TestServeWebhooksRoleForgetsAnErasedCustomer: `serve --role webhooks`
// has opened a customer's webhook (so its keyring holds their key) when
// another process forgets the customer; the delivery's next attempt,
// soon after, carries "[erased]" instead of their personal data, not
// only once the cached key expires.
func TestServeWebhooksRoleForgetsAnErasedCustomer(t *testing.T) {
	db := pgtest.NewURL(t)
	t.Setenv("ESCROW_WEBHOOK_ALLOW_PRIVATE", "true") // the receiver is on loopback
	m := cliCreatedMerchant(t, db, "Acme")
	serial := "123456789"
	check, _ := reference.NUBANCheckDigit("058", serial)
	account := serial + string(check) // the withdrawal's, a personal field of its record
	var (
		mu     sync.Mutex
		bodies []string
	)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		if strings.Contains(string(b), account) {
			w.WriteHeader(http.StatusInternalServerError) // tried again
		}
	}))
	defer receiver.Close()
	received := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), bodies...) }
	if _, err := cli(t, db, "merchant", "set-webhook", "--merchant", m.MerchantID, "--env", "test", "--url", receiver.URL); err != nil {
		t.Fatal(err)
	}
	env := serveWebhooks(t, db)
	a := app.Actor{MerchantID: m.MerchantID, Environment: domain.Test}
	cid, _, err := service(env).CreateCustomer(context.Background(), a, customer.NewCustomer{Firstname: "Ada", Lastname: "Obi",
		Email: "ada@example.com", Phone: "08031234567"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := service(env).TopUp(context.Background(), a, cid, money.Naira(5000)); err != nil {
		t.Fatal(err)
	}
	perms := customer.Permissions{CanWithdraw: true}
	in := app.IntentRequest{Reference: "wd-1", Type: ledger.Withdrawal, Amount: money.Naira(1000),
		Withdrawal: &ledger.WithdrawalDetails{AccountNumber: account, BankCode: "058"}}
	if _, err := service(env).CreateIntent(context.Background(), a, cid, perms, in); err != nil {
		t.Fatal(err)
	}
	if rec, _, err := service(env).Verify(context.Background(), a, cid, perms, "wd-1"); err != nil || rec.Status != ledger.Success {
		t.Fatalf("withdrawal %s: %v", rec.Status, err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("received: %q", received())
		}
	}()
	waitUntil(t, "the customer's webhook, opened", func() bool {
		for _, b := range received() {
			if strings.Contains(b, "wd-1") && strings.Contains(b, account) {
				return true
			}
		}
		return false
	})
	if _, err := cli(t, db, "customer", "forget", "--merchant", m.MerchantID, "--customer", cid); err != nil {
		t.Fatal(err)
	}
	// Each failed attempt is made due again at once, until one arrives
	// without the customer's data: well before a cached key would expire.
	for deadline := time.Now().Add(10 * time.Second); ; {
		n := len(received())
		if _, err := env.Pool.Exec(context.Background(), `UPDATE webhook_deliveries SET next_attempt_at = now() WHERE status = 'pending'`); err != nil {
			t.Fatal(err)
		}
		for len(received()) == n && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		got := received()
		if last := got[len(got)-1]; len(got) > n && strings.Contains(last, "wd-1") && !strings.Contains(last, account) {
			if !strings.Contains(last, "[erased]") {
				t.Fatalf("the webhook after the erasure: %s", last)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhooks role still sends the forgotten customer's data: %q", got[len(got)-1])
		}
		time.Sleep(300 * time.Millisecond)
	}
}
