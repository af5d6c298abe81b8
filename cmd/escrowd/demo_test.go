package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
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
		"export SA=" + sa,
		"export API=http://localhost:8080",
		"Webhooks: run a local receiver in a third terminal:",
		listen,
		"then point the demo merchant at it, from the second terminal:",
		`curl -s -X PUT "$API/v1/merchant/webhook" -H "Authorization: Bearer $SA" \`,
		`-H 'Content-Type: application/json' -d '{"url":"http://127.0.0.1:9000/"}'`,
		setWebhook,
		`Deliveries and retries: curl -s "$API/v1/merchant/webhook/deliveries" -H "Authorization: Bearer $SA"`,
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

// TestDemoPrintsAPasteableBlock: what `make run` prints for a second
// terminal works as pasted there, in the checkout, in a shell that has no
// DATABASE_URL: the keys, the database's URL for the operator commands, a
// request to the running API and an operator command (the test binary
// stands in for ./bin/escrowd).
func TestDemoPrintsAPasteableBlock(t *testing.T) {
	db := pgtest.NewURL(t)
	base := startAPI(t, db)
	t.Setenv("DATABASE_URL", db)
	t.Setenv("ESCROW_DATA_DIR", t.TempDir())
	t.Setenv("ESCROW_PUBLIC_URL", base)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"demo"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var block []string
	lines := strings.Split(out.String(), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "To try it, paste into a second terminal") {
			for _, b := range lines[i+2:] {
				if strings.TrimSpace(b) == "" {
					break
				}
				block = append(block, strings.TrimPrefix(b, "  "))
			}
		}
	}
	if len(block) == 0 || block[0] != "export DATABASE_URL='"+db+"'" {
		t.Fatalf("no block starting with the database's URL:\n%s", out.String())
	}

	checkout := t.TempDir()
	if err := os.Mkdir(filepath.Join(checkout, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	stand := fmt.Sprintf("#!/bin/sh\nESCROWD_TEST_PROCESS=1 exec %s -test.run='^TestEscrowdProcess$' -- \"$@\"\n", shellQuote(os.Args[0]))
	if err := os.WriteFile(filepath.Join(checkout, "bin", "escrowd"), []byte(stand), 0o755); err != nil {
		t.Fatal(err)
	}
	sh := exec.Command("bash", "-e", "-c", strings.Join(block, "\n"))
	sh.Dir = checkout
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") {
			sh.Env = append(sh.Env, kv)
		}
	}
	pasted, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("the pasted block failed: %v\n%s\n---\n%s", err, strings.Join(block, "\n"), pasted)
	}
	for _, want := range []string{`"status":200`, `"message":"Customers fetched successfully"`, "merchants ", "up to date"} {
		if !strings.Contains(string(pasted), want) {
			t.Fatalf("pasted block's output lacks %q:\n%s", want, pasted)
		}
	}
}

func TestPasteableURLHidesThePassword(t *testing.T) {
	if got := pasteableURL("postgres://app:s3cret@db:5432/escrow?sslmode=require"); strings.Contains(got, "s3cret") {
		t.Fatalf("password printed: %s", got)
	}
	if got := shellQuote(pasteableURL("postgres://postgres@127.0.0.1:5/postgres?sslmode=disable")); got != "'postgres://postgres@127.0.0.1:5/postgres?sslmode=disable'" {
		t.Fatalf("throwaway URL printed as %s", got)
	}
}
