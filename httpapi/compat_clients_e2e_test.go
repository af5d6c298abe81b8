package httpapi

import (
	"bufio"
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain/merchant"
)

// nodeReceiver runs the guide's webhook handler (docs/migrating.md) in
// Node.js, verifying with secret; lines are what it printed.
type nodeReceiver struct {
	url   string
	mu    sync.Mutex
	lines []string
}

func startNodeReceiver(t *testing.T, secret string) *nodeReceiver {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("the compatibility test runs the guide's webhook handler in Node.js: %v", err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "webhook.js")
	if err := os.WriteFile(script, []byte(codeBlock(t, migratingSection(t, "migrating-webhook-handler"))), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0") // a free loopback port for the handler
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "SECRET_KEY=" + secret, "PORT=" + strconv.Itoa(port)}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &nodeReceiver{url: "http://127.0.0.1:" + strconv.Itoa(port) + "/webhooks/escrow"}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			r.mu.Lock()
			r.lines = append(r.lines, sc.Text())
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); _ = cmd.Wait(); <-done })
	r.waitFor(t, "listening")
	return r
}

// waitFor waits until the handler printed line.
func (r *nodeReceiver) waitFor(t *testing.T, line string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r.mu.Lock()
		seen := slices.Contains(r.lines, line)
		lines := slices.Clone(r.lines)
		r.mu.Unlock()
		if seen {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook handler did not print %q; it printed %q", line, lines)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPublishedClientsRunUnchanged replays, against escrowd, the request
// shapes of the public escrow API's published clients (its documentation's
// examples and its SDKs: a bearer secret key, JSON with Accept, multipart
// escrows, the duplicate-customer recovery, payment by escrowId) for a
// merchant on the payluk profile, and verifies every webhook with the
// handler its documentation shows, in Node.js, keyed by the super-admin
// secret key alone.
func TestPublishedClientsRunUnchanged(t *testing.T) {
	h := newWebhookHarness(t)
	m, err := h.svc.CreateMerchantWithProfile(context.Background(), "Marketplace", true, "NG", KeyDigest, merchant.ProfilePayluk)
	if err != nil {
		t.Fatal(err)
	}
	h.wait(m.Position)
	h.m = m // h.sa() and h.std() are now this merchant's keys
	secretKey := h.sa()
	rc := startNodeReceiver(t, secretKey)
	h.do(req{method: "PUT", path: "/v1/merchant/webhook", key: secretKey, body: map[string]any{"url": rc.url}}).
		expect(t, 200, "Webhook updated successfully")
	sdk := map[string]string{"Accept": "application/json"}

	// Onboarding: create the customer; a repeat is recognised by its
	// message and recovered by looking the customer up by email.
	newCustomer := func(first, last, email, phone string) string {
		t.Helper()
		body := map[string]any{"firstname": first, "lastname": last, "email": email, "phone": phone}
		r := h.do(req{method: "POST", path: "/v1/customer/create", key: secretKey, body: body, headers: sdk})
		if r.Status == 400 && strings.HasSuffix(r.Message, "already exists under this merchant") {
			found := h.do(req{path: "/v1/customers?email=" + url.QueryEscape(email), key: secretKey, headers: sdk}).expect(t, 200, "").obj()
			return found["data"].([]any)[0].(map[string]any)["customerId"].(string)
		}
		return r.expect(t, 201, "Customer created successfully").obj()["customerId"].(string)
	}
	seller := newCustomer("Ọ̀lá", "Adébáyọ̀", "ola@example.com", "08031112222")
	if again := newCustomer("Ọ̀lá", "Adébáyọ̀", "ola@example.com", "08031112223"); again != seller {
		t.Fatalf("recovered %s, created %s", again, seller)
	}
	buyer := newCustomer("Chiamaka", "Nwánkwọ́", "chi@example.com", "08031113333")
	h.topUp(buyer, 50000).expect(t, 200, "Wallet topped up successfully")

	// Escrows: multipart with an image file, and JSON naming its image by
	// URL; the payment token routes the verify call.
	multi := h.createEscrow(seller, map[string]string{"amount": "20000", "purpose": "Tom & Jerry <DVD>", "whoPays": "both",
		"description": "Ọ̀lá's boxed set", "maxDelivery": "3", "deliveryTimeline": "days"}, 1).expect(t, 201, "Escrow created successfully").obj()
	linked := h.do(req{method: "POST", path: "/v1/escrow/create", key: h.std(), cid: seller, headers: sdk,
		body: map[string]any{"amount": 10000, "purpose": "Lamp", "whoPays": "buyer", "imageUrl": "https://cdn.example.com/lamp.jpg"}}).
		expect(t, 201, "Escrow created successfully").obj()
	for _, e := range []map[string]any{multi, linked} {
		token := e["paymentToken"].(string)
		v := h.do(req{path: "/v1/escrow/verify/" + token, key: h.std(), headers: sdk}).expect(t, 200, "").obj()
		if v["id"] != e["id"] || !tokenShape.MatchString(token) {
			t.Fatalf("verify %s: %v", token, v)
		}
	}
	// Clients route on id shapes: one treats an id holding "-" as its own
	// user's, another checks ObjectId-like ids.
	for _, id := range []string{seller, buyer, multi["id"].(string), linked["id"].(string)} {
		if !recordIDShape.MatchString(id) || strings.Contains(id, "-") {
			t.Fatalf("id %q", id)
		}
	}

	// The buyer pays (escrowId as a string, as the documentation shows)
	// and confirms.
	paid := h.pay(buyer, "order-1001", 20250, multi["id"]).expect(t, 200, "Payment successful").obj()
	h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + multi["id"].(string), key: h.std(), cid: buyer, headers: sdk}).
		expect(t, 200, "Payment confirmed successfully")

	// Every webhook verified with the secret key, as the handler checks it:
	// over the body written again by JSON.stringify and over the raw bytes.
	for _, line := range []string{
		"verified escrow.created " + multi["id"].(string),
		"verified escrow.created " + linked["id"].(string),
		"verified escrow.ongoing " + multi["id"].(string),
		"verified escrow.completed " + multi["id"].(string),
		"verified payment.escrow.success " + paid["id"].(string),
	} {
		rc.waitFor(t, line)
	}
	h.webhooksCaughtUp()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, l := range rc.lines {
		if strings.HasPrefix(l, "refused") {
			t.Fatalf("the handler refused a delivery: %q", rc.lines)
		}
	}
	if n := len(rc.lines); n < 7 {
		t.Fatalf("the handler saw %d deliveries: %q", n-1, rc.lines)
	}
}
