package httpapi

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/escrowd/escrowd/webhooks"
)

// TestReadyzChecksWebhookSubscriber: a server running the webhooks role
// reports the subscriber's lag in /readyz and is not ready while the
// subscriber is missing or further behind than its own limit.
func TestReadyzChecksWebhookSubscriber(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.ReadyWebhooks = true; c.MaxReadyWebhookLag = 2 })
	ready := func() (int, map[string]any) {
		r := h.do(req{path: "/readyz"})
		return r.Status, r.obj()
	}
	eventuallyReady := func(what string, want int, check func(map[string]any) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			code, out := ready()
			if code == want && check(out) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: /readyz %d %v", what, code, out)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	code, out := ready()
	if v, has := out["webhookLag"]; code != 503 || !has || v != nil || out["projectionLag"] != 0.0 {
		t.Fatalf("before the subscriber is installed: %d %v", code, out)
	}
	if _, err := webhooks.Install(context.Background(), h.store, h.pool); err != nil {
		t.Fatal(err)
	}
	eventuallyReady("installed", 200, func(out map[string]any) bool { return out["webhookLag"] == 0.0 })
	// Events the stopped subscriber has not seen, more than its limit; the
	// read models have them.
	for range 3 {
		h.newMerchant(true)
	}
	eventuallyReady("subscriber behind", 503, func(out map[string]any) bool {
		lag, _ := out["webhookLag"].(float64)
		return lag > 2 && out["projectionLag"] == 0.0
	})
	ctx, cancel := context.WithCancel(context.Background())
	r, err := webhooks.NewRunner(ctx, h.store, h.pool, zap.NewNop(), webhooks.NewSubscriber(h.store, h.pool))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventuallyReady("subscriber caught up", 200, func(out map[string]any) bool { return out["webhookLag"] == 0.0 })
}

// TestReadyzWebhookLagHasItsOwnLimit: a subscriber further behind than the
// projection limit, but within its own (default) limit, is reported and
// leaves the API ready: late webhooks are no reason to stop serving.
func TestReadyzWebhookLagHasItsOwnLimit(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.ReadyWebhooks = true; c.MaxReadyLag = 2 })
	if _, err := webhooks.Install(context.Background(), h.store, h.pool); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		h.newMerchant(true)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := h.do(req{path: "/readyz"})
		out := r.obj()
		lag, _ := out["webhookLag"].(float64)
		if lag > 2 && out["projectionLag"] == 0.0 {
			if r.Status != 200 {
				t.Fatalf("subscriber %v events behind (limit 100,000): /readyz %d %v", lag, r.Status, out)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz %d %v", r.Status, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
