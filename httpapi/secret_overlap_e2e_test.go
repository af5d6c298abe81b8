package httpapi

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/webhooks"
)

// TestRotatedSecretSignsBesideTheNewDuringItsOverlap: after a rotation
// with a 24h overlap every signature header of a delivery carries the new
// secret's signature and the old one's, comma-separated, each checked here
// with HMAC-SHA512 over the received body; once the dispatcher's clock is
// past the overlap only the new secret signs.
func TestRotatedSecretSignsBesideTheNewDuringItsOverlap(t *testing.T) {
	var skew atomic.Int64
	headers := []string{webhooks.SignatureHeader, webhooks.PaylukSignatureHeader}
	h := newWebhookHarnessWith(t, func(d *webhooks.Dispatcher) {
		d.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
		d.SignatureHeaders = headers
	})
	type delivery struct {
		body []byte
		sigs map[string]string
	}
	var (
		mu   sync.Mutex
		got  []delivery
		more = make(chan struct{}, 16)
	)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		d := delivery{body: body, sigs: map[string]string{}}
		for _, name := range headers {
			d.sigs[name] = r.Header.Get(name)
		}
		mu.Lock()
		got = append(got, d)
		mu.Unlock()
		more <- struct{}{}
	}))
	t.Cleanup(rc.Close)
	h.do(req{method: "PUT", path: "/v1/merchant/webhook", key: h.sa(), body: map[string]any{"url": rc.URL + "/hooks"}}).expect(t, 200, "")

	ctx := context.Background()
	oldSecret := h.m.SigningSecrets[domain.Test]
	newSecret := app.NewSigningSecret()
	pos, err := h.svc.UpdateMerchant(ctx, h.m.MerchantID, func(m merchant.State) ([]domain.Event, error) {
		return merchant.RotateSigningSecret(m, domain.Test, newSecret, h.svc.Now(), 24*time.Hour)
	})
	if err != nil {
		t.Fatal(err)
	}
	h.wait(pos)
	a := app.Actor{MerchantID: h.m.MerchantID, Environment: domain.Test}
	cid, _, err := h.svc.CreateCustomer(ctx, a, customer.NewCustomer{Firstname: "Ada", Lastname: "Obi", Email: "ada@example.com", Phone: "08031234567"})
	if err != nil {
		t.Fatal(err)
	}
	next := func() delivery {
		t.Helper()
		select {
		case <-more:
		case <-time.After(15 * time.Second):
			t.Fatal("no delivery")
		}
		mu.Lock()
		defer mu.Unlock()
		return got[len(got)-1]
	}
	if _, _, err := h.svc.TopUp(ctx, a, cid, money.Naira(5000)); err != nil {
		t.Fatal(err)
	}
	d := next()
	for _, name := range headers {
		parts := strings.Split(d.sigs[name], ",")
		if len(parts) != 2 || parts[0] != webhooks.Sign(newSecret, d.body) || parts[1] != webhooks.Sign(oldSecret, d.body) {
			t.Fatalf("%s during the overlap: %q", name, d.sigs[name])
		}
		if !webhooks.Verify(oldSecret, d.body, d.sigs[name]) || !webhooks.Verify(newSecret, d.body, d.sigs[name]) {
			t.Fatalf("%s does not verify with both secrets", name)
		}
	}

	skew.Store(int64(24*time.Hour + time.Second))
	other, _, err := h.svc.CreateCustomer(ctx, a, customer.NewCustomer{Firstname: "Bola", Lastname: "Ade", Email: "bola@example.com", Phone: "08031234568"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.svc.TopUp(ctx, a, other, money.Naira(2000)); err != nil {
		t.Fatal(err)
	}
	d = next()
	for _, name := range headers {
		if d.sigs[name] != webhooks.Sign(newSecret, d.body) || webhooks.Verify(oldSecret, d.body, d.sigs[name]) {
			t.Fatalf("%s after the overlap: %q", name, d.sigs[name])
		}
	}
}
