package httpapi

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/projections"
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
	r, err := subscriberRunner(ctx, h.store, h.pool)
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

// TestReadyzCountsLagsPastTheRunnersLimit: the runner stops counting a lag
// at its LagLimit, but /readyz asks for one past each threshold, so a
// subscriber or projector further behind than both still fails the check
// (with the defaults, a webhook limit of 100,000 over a LagLimit of 20,000
// could never fail otherwise).
func TestReadyzCountsLagsPastTheRunnersLimit(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.ReadyWebhooks = true; c.MaxReadyWebhookLag = 3; c.MaxReadyLag = 3 })
	h.runner.LagLimit = 1
	if _, err := webhooks.Install(context.Background(), h.store, h.pool); err != nil {
		t.Fatal(err)
	}
	h.newMerchant(true) // five events the stopped subscriber has not seen
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := h.do(req{path: "/readyz"})
		out := r.obj()
		if lag, _ := out["webhookLag"].(float64); lag >= 4 && out["projectionLag"] == 0.0 {
			notReady(t, r)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhook lag never counted past 3: %d %v", r.Status, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.wantProjectionLagCountedPast3(t)
}

// TestReadyzCountsProjectionLagPastTheRunnersLimit: without the webhooks
// role (the API's own /readyz), the projection lag alone is also counted
// one past MaxReadyLag, so a limit above the runner's LagLimit can fail.
func TestReadyzCountsProjectionLagPastTheRunnersLimit(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxReadyLag = 3 })
	h.runner.LagLimit = 1
	h.do(req{path: "/readyz"}).expect(t, 200, "Ready")
	h.wantProjectionLagCountedPast3(t)
}

// wantProjectionLagCountedPast3 stops the harness's projections, writes
// five events and waits for /readyz to count the projection lag past a
// MaxReadyLag of 3 and refuse.
func (h *harness) wantProjectionLagCountedPast3(t *testing.T) {
	t.Helper()
	h.projecting.stop()
	if _, err := h.svc.CreateMerchant(context.Background(), "Late", false, "NG", KeyDigest); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := h.do(req{path: "/readyz"})
		if lag, _ := r.obj()["projectionLag"].(float64); lag >= 4 {
			notReady(t, r)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("projection lag never counted past 3: %d %s", r.Status, r.Raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReadyzReportsHeldHorizon: a log writer left open holds every
// committed event after it back from the read models, with each projection
// lag still zero. /readyz reports the held events, fails
// once they have waited longer than MaxReadyHorizon, names the session that
// holds them, and is ready again when it ends.
func TestReadyzReportsHeldHorizon(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxReadyHorizon = 300 * time.Millisecond })
	waitReady := func(what string) map[string]any {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			r := h.do(req{path: "/readyz"})
			if r.Status == 200 {
				r.expect(t, 200, "Ready")
				return r.obj()
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: never ready: %d %s", what, r.Status, r.Raw)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	out := waitReady("before")
	if hz, _ := out["horizon"].(map[string]any); hz == nil || hz["maxHeldForMs"] != 300.0 {
		t.Fatalf("ready without the horizon: %v", out)
	}
	stream, end := pgtest.OpenLogWriter(t, h.pool.Config().ConnString())
	if _, err := h.svc.CreateMerchant(context.Background(), "Held", false, "NG", KeyDigest); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := h.do(req{path: "/readyz"})
		if r.Status == 503 {
			out := notReady(t, r)
			hz, _ := out["horizon"].(map[string]any)
			blocker, _ := hz["blockedBy"].(string)
			held, _ := hz["heldEvents"].(float64)
			waited, _ := hz["heldForMs"].(float64)
			// Not ready once held longer than 300 ms; heldForMs is whole
			// milliseconds, so 300.4 ms reads 300.
			if out["projectionLag"] != 0.0 || held < 5 || waited < 300 || !strings.Contains(blocker, stream) {
				t.Fatalf("held: %s, want lag 0, the merchant's 5 events held over 300 ms by the writer of %s", r.Raw, stream)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still ready 10 s into the hold: %s", r.Raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
	end()
	out = waitReady("after the session ended")
	if hz, _ := out["horizon"].(map[string]any); hz["heldEvents"] != 0.0 || hz["blockedBy"] != "" {
		t.Fatalf("ready again but still held: %v", out)
	}
}

// horizonFailing is the harness's runner whose horizon cannot be read
// (the store's query fails) while its lag still can.
type horizonFailing struct{ *projections.Runner }

func (horizonFailing) Horizon(context.Context, int64, time.Duration) (eventstore.Horizon, bool, error) {
	return eventstore.Horizon{}, true, errors.New("horizon query failed")
}

// TestReadyzNotReadyWhenHorizonUnknown: a horizon that cannot be read is
// not a horizon that holds nothing. With the database answering and no
// projection lag, /readyz still refuses: events may be held back from
// every read model at once, and it cannot tell.
func TestReadyzNotReadyWhenHorizonUnknown(t *testing.T) {
	h := newHarness(t)
	h.do(req{path: "/readyz"}).expect(t, 200, "Ready")
	r := h.readyzWith(horizonFailing{h.runner}, h.pool.Ping)
	if out := notReady(t, r); out["database"] != "ok" || out["projectionLag"] != 0.0 {
		t.Fatalf("got %s, want the database ok and no lag, yet not ready", r.Raw)
	}
}
