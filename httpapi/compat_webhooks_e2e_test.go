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

// TestWebhookTwoSignatureHeaders: with two configured
// header names a delivery carries the same valid signature under both, and
// the configured User-Agent, so a receiver written for either name
// verifies it unchanged.
func TestWebhookTwoSignatureHeaders(t *testing.T) {
	h := newWebhookHarnessWith(t, func(d *webhooks.Dispatcher) {
		d.SignatureHeaders = []string{"x-service-signature", "x-payluk-signature"}
		d.UserAgent = "Payluk-Webhooks/2.0"
	})
	secret := h.m.SigningSecrets[domain.Test]
	rc := newRawHooks(t)
	h.do(req{method: "PUT", path: "/v1/merchant/webhook", key: h.sa(), body: map[string]any{"url": rc.srv.URL + "/hooks"}}).
		expect(t, 200, "Webhook updated successfully")
	cid := h.createCustomer(h.sa(), "ada@x.com", "08031234567")
	h.topUp(cid, 5000).expect(t, 200, "")
	header, body := rc.first(t)
	got, raw := []http.Header{header}, [][]byte{body}
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
	rc := newRawHooks(t)
	h.do(req{method: "PUT", path: "/v1/merchant/webhook", key: h.sa(), body: map[string]any{"url": rc.srv.URL + "/hooks"}}).
		expect(t, 200, "Webhook updated successfully")
	seller := h.createCustomer(h.sa(), "s@x.com", "08031234567")
	const purpose, description = `Tom & Jerry <DVD>`, `"Boxed" & <sealed> 'as new'`
	h.createEscrow(seller, map[string]string{"amount": "2000", "purpose": purpose, "description": description, "whoPays": "buyer"}, 0).
		expect(t, 201, "Escrow created successfully")
	header, first := rc.first(t)
	raw, sig := [][]byte{first}, []string{header.Get("x-service-signature")}
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

// rawHooks is a receiver keeping each delivery's headers and raw body.
type rawHooks struct {
	srv     *httptest.Server
	mu      sync.Mutex
	headers []http.Header
	bodies  [][]byte
}

func newRawHooks(t *testing.T) *rawHooks {
	rc := &rawHooks{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.headers, rc.bodies = append(rc.headers, r.Header.Clone()), append(rc.bodies, body)
		rc.mu.Unlock()
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// first waits for the first delivery.
func (rc *rawHooks) first(t *testing.T) (http.Header, []byte) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		rc.mu.Lock()
		if len(rc.bodies) > 0 {
			defer rc.mu.Unlock()
			return rc.headers[0], rc.bodies[0]
		}
		rc.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("no delivery")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
