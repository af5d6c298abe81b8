package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/webhooks"
)

// TestDemoShowsWebhookSetupOnce: `escrowd demo` (what `make run` prints)
// tells how to point the demo merchant at a local receiver, with commands
// that work as printed, and a second run shows the same merchant instead of
// creating another.
func TestDemoShowsWebhookSetupOnce(t *testing.T) {
	db := pgtest.NewURL(t)
	dir := t.TempDir()
	t.Setenv("DATABASE_URL", db)
	t.Setenv("ESCROW_DATA_DIR", dir)
	t.Setenv("ESCROW_PUBLIC_URL", "http://localhost:8080")
	t.Setenv("ESCROW_WEBHOOK_ALLOW_PRIVATE", "true") // as make run sets it
	demo := func() string {
		t.Helper()
		var out bytes.Buffer
		if err := run(context.Background(), []string{"demo"}, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	first := demo()
	raw, err := os.ReadFile(filepath.Join(dir, "demo-merchant.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m app.CreatedMerchant
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	var sa string
	for _, k := range m.Keys {
		if k.Environment == domain.Test && k.Role == merchant.SuperAdmin {
			sa = k.Key
		}
	}
	secret := m.SigningSecrets[domain.Test]
	if m.MerchantID == "" || sa == "" || secret == "" {
		t.Fatalf("demo merchant %s", raw)
	}
	listen := "./bin/escrowd webhooks listen --port 9000 --secret " + secret
	setWebhook := "(or: ./bin/escrowd merchant set-webhook --merchant " + m.MerchantID + " --env test --url http://127.0.0.1:9000/)"
	guidance := []string{
		"Webhooks: run a local receiver in another terminal, then point the demo merchant at it:",
		listen,
		`curl -s -X PUT http://localhost:8080/v1/merchant/webhook \`,
		`-H 'Authorization: Bearer ` + sa + `' -H 'Content-Type: application/json' \`,
		`-d '{"url":"http://127.0.0.1:9000/"}'`,
		setWebhook,
		"Deliveries and retries: curl -s http://localhost:8080/v1/merchant/webhook/deliveries -H 'Authorization: Bearer " + sa + "'",
	}
	lines := strings.Split(first, "\n")
	at := -1
	for _, want := range guidance {
		found := false
		for i := at + 1; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) == want {
				at, found = i, true
				break
			}
		}
		if !found {
			t.Fatalf("demo output lacks (in this order) %q:\n%s", want, first)
		}
	}

	// Again: the same merchant, keys and guidance; no second merchant.
	if second := demo(); second != first {
		t.Fatalf("second run differs:\n%s\n---\n%s", first, second)
	}
	env := testEnv(t, db)
	var merchants int
	if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM rm_merchants`).Scan(&merchants); err != nil || merchants != 1 {
		t.Fatalf("%d merchants after two demo runs (%v)", merchants, err)
	}

	// The printed set-webhook command works as printed.
	args := strings.Fields(strings.TrimSuffix(strings.TrimPrefix(setWebhook, "(or: ./bin/escrowd "), ")"))
	if err := run(context.Background(), args, io.Discard, io.Discard); err != nil {
		t.Fatalf("escrowd %v: %v", args, err)
	}
	var hook string
	if err := env.Pool.QueryRow(context.Background(), `SELECT webhook_test FROM rm_merchants WHERE merchant_id = $1`, m.MerchantID).
		Scan(&hook); err != nil || hook != "http://127.0.0.1:9000/" {
		t.Fatalf("test callback %q %v", hook, err)
	}

	// The printed listener (on a free port) accepts what the demo merchant
	// signs: its secret is the merchant's test signing secret.
	args = strings.Fields(strings.TrimPrefix(listen, "./bin/escrowd "))
	port := freePort(t)
	for i := range args {
		if args[i] == "9000" {
			args[i] = fmt.Sprint(port)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var printed syncBuffer
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := run(ctx, args, &printed, io.Discard); err != nil {
			t.Error(err)
		}
	}()
	waitUntil(t, "the listener", func() bool { return strings.Contains(printed.String(), "listening on") })
	body := []byte(`{"id":"m1","event":"payment.deposit.success","data":{},"timestamp":"2026-01-01T00:00:00.000Z"}`)
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/", port), bytes.NewReader(body))
	req.Header.Set(webhooks.SignatureHeader, webhooks.Sign(secret, body))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(printed.String(), "signature ok") {
		t.Fatalf("listener answered %d:\n%s", res.StatusCode, printed.String())
	}
}
