package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/webhooks"
)

// TestWebhookTwoSignatureHeaders (api-decisions §7): with two configured
// header names a delivery carries the same valid signature under both, and
// the configured User-Agent, so a receiver written for either name
// verifies it unchanged.
func TestWebhookTwoSignatureHeaders(t *testing.T) {
	h := newWebhookHarnessWith(t, func(d *webhooks.Dispatcher) {
		d.SignatureHeaders = []string{"x-service-signature", "x-payluk-signature"}
		d.UserAgent = "Payluk-Webhooks/2.0"
	})
	secret := h.m.SigningSecrets[domain.Test]
	var (
		mu  sync.Mutex
		got []http.Header
		raw [][]byte
	)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, raw = append(got, r.Header.Clone()), append(raw, body)
		mu.Unlock()
	}))
	defer rc.Close()
	h.do(req{method: "PUT", path: "/v1/merchant/webhook", key: h.sa(), body: map[string]any{"url": rc.URL + "/hooks"}}).
		expect(t, 200, "Webhook updated successfully")
	cid := h.createCustomer(h.sa(), "ada@x.com", "08031234567")
	h.topUp(cid, 5000).expect(t, 200, "")
	deadline := time.Now().Add(15 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no delivery")
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	var env webhooks.Envelope
	if err := json.Unmarshal(raw[0], &env); err != nil || env.Event != "payment.deposit.success" {
		t.Fatalf("delivery %s: %v", raw[0], err)
	}
	a, b := got[0].Get("x-service-signature"), got[0].Get("x-payluk-signature")
	if a == "" || a != b || !webhooks.Verify(secret, raw[0], a) || !webhooks.Verify(secret, raw[0], b) {
		t.Fatalf("signatures %q and %q of %s", a, b, raw[0])
	}
	if ua := got[0].Get("User-Agent"); ua != "Payluk-Webhooks/2.0" {
		t.Fatalf("User-Agent %q", ua)
	}
}

// TestWebhookJSONIsNotHTMLEscaped: &, < and > reach the receiver as
// written (not \u0026, \u003c, \u003e), and the signature verifies on
// the raw bytes received.
func TestWebhookJSONIsNotHTMLEscaped(t *testing.T) {
	h := newWebhookHarness(t)
	secret := h.m.SigningSecrets[domain.Test]
	var (
		mu  sync.Mutex
		raw [][]byte
		sig []string
	)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		raw, sig = append(raw, body), append(sig, r.Header.Get("x-service-signature"))
		mu.Unlock()
	}))
	defer rc.Close()
	h.do(req{method: "PUT", path: "/v1/merchant/webhook", key: h.sa(), body: map[string]any{"url": rc.URL + "/hooks"}}).
		expect(t, 200, "Webhook updated successfully")
	seller := h.createCustomer(h.sa(), "s@x.com", "08031234567")
	const purpose, description = `Tom & Jerry <DVD>`, `"Boxed" & <sealed> 'as new'`
	h.createEscrow(seller, map[string]string{"amount": "2000", "purpose": purpose, "description": description, "whoPays": "buyer"}, 0).
		expect(t, 201, "Escrow created successfully")
	deadline := time.Now().Add(15 * time.Second)
	for {
		mu.Lock()
		n := len(raw)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no delivery")
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	body := string(raw[0])
	for _, want := range []string{`"purpose":"Tom & Jerry <DVD>"`, `"description":"\"Boxed\" & <sealed> 'as new'"`} {
		if !strings.Contains(body, want) {
			t.Fatalf("body lacks %s: %s", want, body)
		}
	}
	for _, escaped := range []string{`\u0026`, `\u003c`, `\u003e`} {
		if strings.Contains(body, escaped) {
			t.Fatalf("body has %s: %s", escaped, body)
		}
	}
	if !webhooks.Verify(secret, raw[0], sig[0]) {
		t.Fatalf("signature %q does not verify on the bytes received", sig[0])
	}
	var env webhooks.Envelope
	if err := json.Unmarshal(raw[0], &env); err != nil || env.Event != "escrow.created" || env.Data.(map[string]any)["purpose"] != purpose {
		t.Fatalf("delivery %s: %v", raw[0], err)
	}
}
