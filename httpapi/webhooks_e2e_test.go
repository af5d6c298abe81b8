package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/domain/webhook"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/gateway"
	"github.com/escrowd/escrowd/projections"
	"github.com/escrowd/escrowd/webhooks"
)

// newWebhookHarness is newHarness with the webhook role running too: the
// subscriber (its own runner) and a dispatcher with a fast retry schedule.
func newWebhookHarness(t *testing.T, mutate ...func(*Config)) *harness {
	t.Helper()
	return newWebhookHarnessWith(t, nil, mutate...)
}

// newWebhookHarnessWith is newWebhookHarness with the dispatcher tuned by
// tune (when not nil) before it starts.
func newWebhookHarnessWith(t *testing.T, tune func(*webhooks.Dispatcher), mutate ...func(*Config)) *harness {
	t.Helper()
	// The test receivers listen on loopback: allowed, as the operator's
	// ESCROW_WEBHOOK_ALLOW_PRIVATE allows it (mutate may turn it off).
	mutate = append([]func(*Config){func(c *Config) { c.WebhookAllowPrivate = true }}, mutate...)
	return startHarness(t, func(ctx context.Context, store eventstore.Store, pool *pgxpool.Pool) []func(context.Context) error {
		hooks, err := subscriberRunner(ctx, store, pool)
		if err != nil {
			t.Fatal(err)
		}
		d := &webhooks.Dispatcher{Pool: pool, Endpoints: wired.Endpoints(store), Sealer: wired.Sealer(store),
			PollInterval: 20 * time.Millisecond, Schedule: []time.Duration{30 * time.Millisecond, 30 * time.Millisecond, 30 * time.Millisecond},
			AllowPrivate: true}
		if tune != nil {
			tune(d)
		}
		return []func(context.Context) error{hooks.Run, d.Run}
	}, mutate...)
}

// hookHit is one webhook request a test receiver got.
type hookHit struct {
	ID, Event, Attempt string
	SigOK              bool
	Status             int
	Data               map[string]any
	Timestamp          string
}

// hookReceiver is a real HTTP receiver checking signatures with secret;
// fail says how many first attempts of each message to answer 500.
type hookReceiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	hits []hookHit
}

func newHookReceiver(t *testing.T, secret string, fail int) *hookReceiver {
	r := &hookReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var env struct {
			ID        string         `json:"id"`
			Event     string         `json:"event"`
			Data      map[string]any `json:"data"`
			Timestamp string         `json:"timestamp"`
		}
		_ = json.Unmarshal(body, &env)
		h := hookHit{ID: env.ID, Event: env.Event, Attempt: req.Header.Get(webhooks.AttemptHeader), Data: env.Data,
			Timestamp: env.Timestamp, SigOK: webhooks.Verify(secret, body, req.Header.Get("x-service-signature")) &&
				req.Header.Get("Content-Type") == "application/json" && req.Header.Get("User-Agent") == webhooks.UserAgent,
			Status: 200}
		if n, _ := strconv.Atoi(h.Attempt); n <= fail {
			h.Status = 500
		}
		r.mu.Lock()
		r.hits = append(r.hits, h)
		r.mu.Unlock()
		w.WriteHeader(h.Status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// delivered lists the 2xx-answered hits in arrival order.
func (r *hookReceiver) delivered() []hookHit {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []hookHit
	for _, h := range r.hits {
		if h.Status == 200 {
			out = append(out, h)
		}
	}
	return out
}

// waitFor waits until n webhooks have been delivered, then until nothing
// more can arrive (h.webhooksSettled), and returns what was delivered.
func (r *hookReceiver) waitFor(t *testing.T, h *harness, n int) []hookHit {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := r.delivered()
		if len(got) >= n {
			h.webhooksSettled(t)
			return r.delivered()
		}
		if time.Now().After(deadline) {
			t.Fatalf("got %d webhooks, want %d: %+v", len(got), n, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// webhooksSettled waits until no webhook can be sent any more: the
// subscriber has read the whole log (every message written so far is in
// the outbox) and no delivery is pending or in flight.
func (h *harness) webhooksSettled(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	sub := wired.Subscriber(h.store, h.pool)
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, err := projections.Status(ctx, h.pool, h.store, sub)
		if err != nil {
			t.Fatal(err)
		}
		var open int
		if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE status IN ('pending', 'delivering')`).Scan(&open); err != nil {
			t.Fatal(err)
		}
		if st[0].Lag == 0 && open == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhooks never settled: subscriber lag %d, %d deliveries pending or in flight", st[0].Lag, open)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWebhooksEscrowLifecycle(t *testing.T) {
	h := newWebhookHarness(t)
	rc := newHookReceiver(t, h.m.SigningSecrets[domain.Test], 0)
	h.do(req{path: "/v1/merchant/webhook", key: h.sa()}).expect(t, 200, "Webhook fetched successfully")
	put := h.do(req{method: "PUT", path: "/v1/merchant/webhook", key: h.sa(), body: map[string]any{"url": rc.srv.URL + "/hooks"}}).
		expect(t, 200, "Webhook updated successfully").obj()
	if put["url"] != rc.srv.URL+"/hooks" || put["environment"] != "test" {
		t.Fatalf("put %v", put)
	}
	if got := h.do(req{path: "/v1/merchant/webhook", key: h.sa()}).expect(t, 200, "").obj(); got["url"] != rc.srv.URL+"/hooks" {
		t.Fatalf("get %v", got)
	}

	seller := h.createCustomer(h.sa(), "s@x.com", "08035550001")
	buyer := h.funded("b@x.com", "08035550002", 20000)
	e := h.createEscrow(seller, map[string]string{"amount": "10000", "purpose": "Phone", "whoPays": "buyer",
		"description": "A used phone", "maxDelivery": "3", "deliveryTimeline": "days"}, 0).expect(t, 201, "").obj()
	token, id := e["paymentToken"].(string), e["id"].(string)
	h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + token, key: h.sa(),
		body: map[string]any{"additionalFee": 500}}).expect(t, 200, "Additional fee updated successfully")
	h.pay(buyer, "pay-1", 10750, id).expect(t, 200, "Payment successful")
	h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + id, key: h.std(), cid: buyer}).
		expect(t, 200, "Payment confirmed successfully")
	final := h.do(req{path: "/v1/escrow/verify/" + token, key: h.std()}).expect(t, 200, "").obj()
	// An escrow created and deleted unpaid.
	gone := h.createEscrow(seller, map[string]string{"amount": "2000", "purpose": "Shoes", "whoPays": "seller"}, 0).
		expect(t, 201, "").obj()
	h.do(req{method: "DELETE", path: "/v1/escrow/delete/" + gone["paymentToken"].(string), key: h.std(), cid: seller}).
		expect(t, 200, "")

	hits := rc.waitFor(t, h, 9)
	if len(hits) != 9 {
		t.Fatalf("%d webhooks: %+v", len(hits), hits)
	}
	pos := map[string]int{}
	ids := map[string]bool{}
	byEvent := map[string]hookHit{}
	for i, hh := range hits {
		if !hh.SigOK {
			t.Fatalf("%s: signature or headers invalid", hh.Event)
		}
		if ids[hh.ID] {
			t.Fatalf("message %s delivered twice", hh.ID)
		}
		ids[hh.ID] = true
		if hh.Attempt != "1" {
			t.Fatalf("%s attempt %s", hh.Event, hh.Attempt)
		}
		if _, err := time.Parse(time.RFC3339, hh.Timestamp); err != nil || hh.Timestamp[len(hh.Timestamp)-1] != 'Z' {
			t.Fatalf("timestamp %q", hh.Timestamp)
		}
		key := hh.Event
		if hh.Event == "escrow.created" || hh.Event == "escrow.deleted" {
			key += ":" + hh.Data["id"].(string)
		}
		pos[key] = i
		byEvent[key] = hh
	}
	for _, want := range []string{"payment.deposit.success", "escrow.created:" + id, "escrow.ongoing", "payment.escrow.success",
		"escrow.completed", "payment.commission.success", "payment.delivery.success",
		"escrow.created:" + gone["id"].(string), "escrow.deleted:" + gone["id"].(string)} {
		if _, ok := pos[want]; !ok {
			t.Fatalf("missing %s in %v", want, pos)
		}
	}
	// Per escrow, in the order things happened.
	if !(pos["escrow.created:"+id] < pos["escrow.ongoing"] && pos["escrow.ongoing"] < pos["escrow.completed"]) ||
		pos["escrow.created:"+gone["id"].(string)] > pos["escrow.deleted:"+gone["id"].(string)] {
		t.Fatalf("escrow events out of order: %v", pos)
	}
	// Payloads: the escrow as the API shows it, the transaction records.
	if d := byEvent["escrow.created:"+id].Data; d["status"] != "PENDING" || d["additionalFee"] != 0.0 || d["id"] != id {
		t.Fatalf("created %v", d)
	}
	if d := byEvent["escrow.ongoing"].Data; d["status"] != "ONGOING" || d["state"] != "OPENED" || d["buyerId"] != buyer || d["additionalFee"] != 500.0 {
		t.Fatalf("ongoing %v", d)
	}
	if d := byEvent["escrow.completed"].Data; !reflect.DeepEqual(d, final) {
		t.Fatalf("completed payload differs from the API's escrow:\n%v\n%v", d, final)
	}
	for ev, want := range map[string]float64{"payment.deposit.success": 20000, "payment.escrow.success": 10750,
		"payment.commission.success": 125, "payment.delivery.success": 500} {
		d := byEvent[ev].Data
		if d["amount"] != want || d["status"] != "success" || d["reference"] == nil || d["merchantId"] != h.m.MerchantID {
			t.Fatalf("%s: %v", ev, d)
		}
	}
	if byEvent["payment.escrow.success"].Data["reference"] != "pay-1" || byEvent["payment.deposit.success"].Data["customerId"] != buyer {
		t.Fatal("payment payloads")
	}

	// The delivery log.
	log := h.do(req{path: "/v1/merchant/webhook/deliveries?limit=5", key: h.sa()}).expect(t, 200, "Webhook deliveries fetched successfully").obj()
	pg := log["pagination"].(map[string]any)
	if pg["count"] != 9.0 || pg["pages"] != 2.0 || len(log["data"].([]any)) != 5 {
		t.Fatalf("deliveries %v", log)
	}
	for _, x := range log["data"].([]any) {
		d := x.(map[string]any)
		if d["status"] != "delivered" || d["attempts"] != 1.0 || d["lastStatusCode"] != 200.0 || d["nextAttemptAt"] != nil ||
			d["deliveredAt"] == nil || !ids[d["id"].(string)] || len(d["attemptLog"].([]any)) != 1 {
			t.Fatalf("delivery %v", d)
		}
	}
	one := h.do(req{path: "/v1/merchant/webhook/deliveries?event=escrow.completed", key: h.sa()}).expect(t, 200, "").obj()
	if rows := one["data"].([]any); len(rows) != 1 || rows[0].(map[string]any)["id"] != byEvent["escrow.completed"].ID {
		t.Fatalf("filtered %v", one)
	}
	h.do(req{path: "/v1/merchant/webhook/deliveries?status=lost", key: h.sa()}).
		expect(t, 400, "status must be one of pending, delivering, delivered, failed, no_endpoint")
}

func TestWebhookRetriesVisibleAndManualRetry(t *testing.T) {
	h := newWebhookHarness(t)
	rc := newHookReceiver(t, h.m.SigningSecrets[domain.Test], 2)
	h.do(req{method: "PUT", path: "/v1/merchant/webhook", key: h.sa(), body: map[string]any{"url": rc.srv.URL}}).expect(t, 200, "")
	h.funded("b@x.com", "08035550002", 5000)
	hits := rc.waitFor(t, h, 1)
	if len(hits) != 1 || hits[0].Event != "payment.deposit.success" || hits[0].Attempt != "3" {
		t.Fatalf("hits %+v", hits)
	}
	id := hits[0].ID
	list := h.do(req{path: "/v1/merchant/webhook/deliveries", key: h.sa()}).expect(t, 200, "").obj()["data"].([]any)
	d := list[0].(map[string]any)
	if d["id"] != id || d["attempts"] != 3.0 || d["status"] != "delivered" || d["lastStatusCode"] != 200.0 || d["lastError"] != nil {
		t.Fatalf("delivery %v", d)
	}
	codes := []any{}
	for _, a := range d["attemptLog"].([]any) {
		codes = append(codes, a.(map[string]any)["statusCode"])
	}
	if fmt.Sprint(codes) != "[500 500 200]" {
		t.Fatalf("attempt log %v", d["attemptLog"])
	}

	// Manual redelivery: attempt 4 reaches the receiver.
	r := h.do(req{method: "POST", path: "/v1/merchant/webhook/deliveries/" + id + "/retry", key: h.sa()}).
		expect(t, 200, "Webhook delivery queued for retry").obj()
	if r["id"] != id || r["status"] != "pending" || r["nextAttemptAt"] == nil {
		t.Fatalf("retry %v, want the delivery as queued", r)
	}
	hits = rc.waitFor(t, h, 2)
	if hits[1].ID != id || hits[1].Attempt != "4" {
		t.Fatalf("redelivery %+v", hits[1])
	}
	// Manual retries are bounded: ten per delivery, each delivered, then
	// 400 and nothing more is sent.
	for n := 2; n <= webhook.MaxRedeliveries; n++ {
		h.do(req{method: "POST", path: "/v1/merchant/webhook/deliveries/" + id + "/retry", key: h.sa()}).
			expect(t, 200, "Webhook delivery queued for retry")
		rc.waitFor(t, h, n+1)
	}
	h.do(req{method: "POST", path: "/v1/merchant/webhook/deliveries/" + id + "/retry", key: h.sa()}).
		expect(t, 400, "A delivery may be retried by hand at most 10 times")
	after := h.do(req{path: "/v1/merchant/webhook/deliveries", key: h.sa()}).expect(t, 200, "").obj()["data"].([]any)[0].(map[string]any)
	if after["attempts"] != float64(3+webhook.MaxRedeliveries) || after["status"] != "delivered" {
		t.Fatalf("after the refused retry: %v", after)
	}

	// Access rules and other merchants.
	other := h.newMerchant(true)
	h.do(req{method: "POST", path: "/v1/merchant/webhook/deliveries/" + id + "/retry", key: key(other, domain.Test, merchant.SuperAdmin)}).
		expect(t, 404, "Delivery not found")
	h.do(req{method: "POST", path: "/v1/merchant/webhook/deliveries/nope/retry", key: h.sa()}).expect(t, 404, "Delivery not found")
	h.do(req{path: "/v1/merchant/webhook/deliveries", key: h.std()}).expect(t, 401, "Access denied")
	h.do(req{path: "/v1/merchant/webhook", key: h.sa(), cid: "x"}).expect(t, 400, "customer-id is not allowed in request header")
	if l := h.do(req{path: "/v1/merchant/webhook/deliveries", key: key(other, domain.Test, merchant.SuperAdmin)}).expect(t, 200, "").obj(); len(l["data"].([]any)) != 0 {
		t.Fatalf("other merchant sees %v", l)
	}
}

func TestWebhookURLRules(t *testing.T) {
	h := newWebhookHarness(t, func(c *Config) { c.WebhookAllowPrivate = false })
	put := func(k, host string, body any) resp {
		return h.do(req{method: "PUT", path: "/v1/merchant/webhook", key: k, host: host, body: body})
	}
	const private = "url must be a public http(s) address" // every refusal alike: no probing
	put(h.sa(), "", map[string]any{}).expect(t, 400, "url is required")
	put(h.sa(), "", map[string]any{"url": 5}).expect(t, 400, "url must be a string")
	put(h.sa(), "", map[string]any{"url": "not a url"}).expect(t, 400, private)
	put(h.std(), "", map[string]any{"url": "http://localhost:1"}).expect(t, 401, "Access denied")
	// Test callbacks may be plain http, but not local:
	// a test key may not probe the host's network either.
	for _, u := range []string{"http://localhost:9000/cb", "http://127.0.0.1:5432/", "http://169.254.169.254/latest/meta-data/",
		"https://[::127.0.0.1]/", "http://[::ffff:10.0.0.1]/", "http://[2002:a9fe:a9fe::]/", "http://[64:ff9b::7f00:1]/",
		"http://100.64.0.1/", "http://[fd00::1]/"} {
		put(h.sa(), "", map[string]any{"url": u}).expect(t, 400, private)
	}
	put(h.sa(), "", map[string]any{"url": "http://93.184.216.34/" + strings.Repeat("a", 2048)}).expect(t, 400, private)
	put(h.sa(), "", map[string]any{"url": "http://93.184.216.34/cb"}).expect(t, 200, "")
	live := key(h.m, domain.Live, merchant.SuperAdmin)
	put(live, liveHost, map[string]any{"url": "http://hooks.example.com/cb"}).expect(t, 400, private)
	put(live, liveHost, map[string]any{"url": "https://127.0.0.1/cb"}).expect(t, 400, private)
	put(live, liveHost, map[string]any{"url": "https://10.1.2.3/cb"}).expect(t, 400, private)
	put(live, liveHost, map[string]any{"url": "https://[::127.0.0.1]/"}).expect(t, 400, private)
	put(live, liveHost, map[string]any{"url": "https://93.184.216.34/cb"}).expect(t, 200, "")
	// Environments are separate.
	if g := h.do(req{path: "/v1/merchant/webhook", key: live, host: liveHost}).expect(t, 200, "").obj(); g["url"] != "https://93.184.216.34/cb" || g["environment"] != "live" {
		t.Fatalf("live %v", g)
	}
	if g := h.do(req{path: "/v1/merchant/webhook", key: h.sa()}).expect(t, 200, "").obj(); g["url"] != "http://93.184.216.34/cb" {
		t.Fatalf("test %v", g)
	}
	// Clearing.
	put(h.sa(), "", map[string]any{"url": nil}).expect(t, 200, "")
	if g := h.do(req{path: "/v1/merchant/webhook", key: h.sa()}).expect(t, 200, "").obj(); g["url"] != nil {
		t.Fatalf("cleared %v", g)
	}

	// The operator may allow private callbacks (ESCROW_WEBHOOK_ALLOW_PRIVATE).
	hp := newWebhookHarness(t)
	hp.do(req{method: "PUT", path: "/v1/merchant/webhook", key: hp.sa(),
		body: map[string]any{"url": "http://localhost:9000/cb"}}).expect(t, 200, "")
	hp.do(req{method: "PUT", path: "/v1/merchant/webhook", key: key(hp.m, domain.Live, merchant.SuperAdmin), host: liveHost,
		body: map[string]any{"url": "https://127.0.0.1/cb"}}).expect(t, 200, "")
	hp.do(req{method: "PUT", path: "/v1/merchant/webhook", key: key(hp.m, domain.Live, merchant.SuperAdmin), host: liveHost,
		body: map[string]any{"url": "http://127.0.0.1/cb"}}).expect(t, 400, private)
}

// TestWebhookDeliveryLogShowsNextAttempt: after a failed first attempt the
// delivery log shows the message pending, its attempt and status code, and
// the next attempt the first retry pause (5 s ± 10 %) after it; the retry
// then comes no earlier.
func TestWebhookDeliveryLogShowsNextAttempt(t *testing.T) {
	if webhooks.DefaultSchedule[0] != 5*time.Second || webhooks.Jitter != 0.10 {
		t.Fatalf("§5 schedule starts at 5 s ± 10%%, not %s ± %v", webhooks.DefaultSchedule[0], webhooks.Jitter)
	}
	// The production schedule and jitter (no Schedule or Rand override).
	h := newWebhookHarnessWith(t, func(d *webhooks.Dispatcher) { d.Schedule = nil })
	rc := newHookReceiver(t, h.m.SigningSecrets[domain.Test], 1)
	h.do(req{method: "PUT", path: "/v1/merchant/webhook", key: h.sa(), body: map[string]any{"url": rc.srv.URL}}).expect(t, 200, "")
	h.funded("b@x.com", "08035550002", 5000)

	var d map[string]any
	deadline := time.Now().Add(15 * time.Second)
	for {
		rows := h.do(req{path: "/v1/merchant/webhook/deliveries?status=pending", key: h.sa()}).expect(t, 200, "").obj()["data"].([]any)
		if len(rows) == 1 && rows[0].(map[string]any)["attempts"] == 1.0 {
			d = rows[0].(map[string]any)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pending delivery after a failed attempt: %v", rows)
		}
		time.Sleep(10 * time.Millisecond)
	}
	seen := time.Now() // the outcome, next attempt included, was stored before this
	log := d["attemptLog"].([]any)
	if d["status"] != "pending" || d["event"] != "payment.deposit.success" || d["lastStatusCode"] != 500.0 ||
		d["lastError"] != "HTTP 500" || d["deliveredAt"] != nil || len(log) != 1 {
		t.Fatalf("pending delivery %v", d)
	}
	first := log[0].(map[string]any)
	if first["attempt"] != 1.0 || first["statusCode"] != 500.0 {
		t.Fatalf("attempt log %v", log)
	}
	at := parseTime(t, first["at"])
	ended := at.Add(time.Duration(first["durationMs"].(float64)) * time.Millisecond)
	next := parseTime(t, d["nextAttemptAt"])
	pause := webhooks.DefaultSchedule[0]
	lo := time.Duration(float64(pause) * (1 - webhooks.Jitter))
	hi := time.Duration(float64(pause) * (1 + webhooks.Jitter))
	const slack = 5 * time.Millisecond // the log's millisecond durations
	if next.Before(ended.Add(lo-slack)) || next.After(seen.Add(hi)) {
		t.Fatalf("next attempt %s is %s after the attempt ended; want %s to %s", next, next.Sub(ended), lo, hi)
	}

	// The retry comes at the announced time and is delivered.
	hits := rc.waitFor(t, h, 1)
	if len(hits) != 1 || hits[0].Attempt != "2" || hits[0].ID != d["id"] {
		t.Fatalf("hits %+v", hits)
	}
	done := h.do(req{path: "/v1/merchant/webhook/deliveries", key: h.sa()}).expect(t, 200, "").obj()["data"].([]any)[0].(map[string]any)
	log = done["attemptLog"].([]any)
	if done["status"] != "delivered" || done["attempts"] != 2.0 || done["lastStatusCode"] != 200.0 || done["nextAttemptAt"] != nil || len(log) != 2 {
		t.Fatalf("delivered %v", done)
	}
	if retried := parseTime(t, log[1].(map[string]any)["at"]); retried.Before(next.Add(-slack)) {
		t.Fatalf("retried at %s, before the announced %s", retried, next)
	}
}

func parseTime(t *testing.T, v any) time.Time {
	t.Helper()
	s, _ := v.(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("time %v: %v", v, err)
	}
	return at
}

// webhooksCaughtUp waits until the webhook subscriber has read the whole
// log, so every message of what happened so far is in the outbox. It waits
// for Last, not Head: writes no longer wait for the read models, and an
// open transaction elsewhere on the server can hold Head before them.
func (h *harness) webhooksCaughtUp() {
	h.t.Helper()
	ctx := context.Background()
	head, err := h.store.Last(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		var c, p int64
		if err := h.pool.QueryRow(ctx, `SELECT commit_pos, prepare_pos FROM projection_checkpoints WHERE name = $1`,
			webhooks.SubscriberName).Scan(&c, &p); err != nil {
			h.t.Fatal(err)
		}
		if (eventstore.Position{Commit: uint64(c), Prepare: uint64(p)}).AtLeast(head) {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("webhook subscriber at %d/%d, log head %s", c, p, head)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// allWebhooks waits for every message so far to be delivered and returns
// the deliveries, checking that none was delivered twice or badly signed.
func (h *harness) allWebhooks(rc *hookReceiver) []hookHit {
	h.t.Helper()
	h.webhooksCaughtUp()
	total := h.do(req{path: "/v1/merchant/webhook/deliveries", key: h.sa()}).expect(h.t, 200, "").obj()["pagination"].(map[string]any)["count"].(float64)
	hits := rc.waitFor(h.t, h, int(total))
	seen := map[string]bool{}
	for _, hh := range hits {
		if !hh.SigOK || seen[hh.ID] {
			h.t.Fatalf("%s %s: bad signature or delivered twice", hh.Event, hh.ID)
		}
		seen[hh.ID] = true
	}
	if len(hits) != int(total) {
		h.t.Fatalf("%d deliveries for %v messages: %+v", len(hits), total, hits)
	}
	return hits
}

// apiRecords is every transaction record the API shows (the customers'
// histories and the merchant's transactions), by id.
func (h *harness) apiRecords(cids ...string) map[string]map[string]any {
	h.t.Helper()
	out := map[string]map[string]any{}
	add := func(r resp) {
		for _, x := range r.obj()["data"].([]any) {
			rec := x.(map[string]any)
			out[rec["id"].(string)] = rec
		}
	}
	for _, cid := range cids {
		add(h.do(req{path: "/v1/payment/history?limit=100", key: h.std(), cid: cid}).expect(h.t, 200, ""))
	}
	add(h.do(req{path: "/v1/merchant/transactions?limit=100", key: h.sa()}).expect(h.t, 200, ""))
	return out
}

// paymentPayloads checks every payment.* message: its name is
// payment.<transactionType>.<status> of its data, and the data is, whole,
// the record the API shows (records) and, when given by reference, the
// record an API call answered (answered). It returns the payment messages'
// "event reference" keys with their counts.
func paymentPayloads(t *testing.T, hits []hookHit, records map[string]map[string]any, answered map[string]map[string]any) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, hh := range hits {
		if !strings.HasPrefix(hh.Event, "payment.") {
			continue
		}
		d := hh.Data
		if want := "payment." + fmt.Sprint(d["transactionType"]) + "." + fmt.Sprint(d["status"]); hh.Event != want {
			t.Fatalf("event %s for a record %s", hh.Event, want)
		}
		rec, ok := records[fmt.Sprint(d["id"])]
		if !ok {
			t.Fatalf("%s: record %v is not in the API", hh.Event, d["id"])
		}
		if !reflect.DeepEqual(d, rec) {
			t.Fatalf("%s payload differs from the API's record:\n%s\n%s", hh.Event, jsonOf(d), jsonOf(rec))
		}
		ref := fmt.Sprint(d["reference"])
		if a, ok := answered[ref]; ok && !reflect.DeepEqual(d, a) {
			t.Fatalf("%s payload differs from the API's answer for %s:\n%s\n%s", hh.Event, ref, jsonOf(d), jsonOf(a))
		}
		out[hh.Event+" "+ref]++
	}
	return out
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// withoutEscrows is a POST /v1/payment/escrow answer as the bare
// transaction record (it also lists the escrows paid).
func withoutEscrows(r map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range r {
		if k != "escrows" {
			out[k] = v
		}
	}
	return out
}

// depositsFailingFor is the test collection gateway, except that it refuses
// deposits whose reference starts with prefix.
type depositsFailingFor struct {
	gateway.TestCollection
	prefix string
}

func (g depositsFailingFor) Confirm(ctx context.Context, d ledger.Record) (payment.Outcome, error) {
	if strings.HasPrefix(d.Reference, g.prefix) {
		return payment.Outcome{OK: false, Reason: "No money arrived"}, nil
	}
	return g.TestCollection.Confirm(ctx, d)
}

// TestWebhookPaymentEventsFromRealFlows drives deposits (confirmed and
// refused), withdrawals (paid out and reversed) and a wallet transfer
// through the API: each settled record is announced exactly once, under
// payment.<type>.<outcome>, with the record the API shows as its data;
// pending stages announce nothing.
func TestWebhookPaymentEventsFromRealFlows(t *testing.T) {
	h := newWebhookHarness(t)
	h.svc.Gateways[domain.Test] = gateway.Set{Collection: depositsFailingFor{prefix: "dep-fail"}, Payouts: gateway.TestPayouts{}}
	rc := newHookReceiver(t, h.m.SigningSecrets[domain.Test], 0)
	h.do(req{method: "PUT", path: "/v1/merchant/webhook", key: h.sa(), body: map[string]any{"url": rc.srv.URL}}).expect(t, 200, "")

	a := h.createCustomer(h.sa(), "a@x.com", "08031110007")
	b := h.createCustomer(h.sa(), "b@x.com", "08031110008")
	answered := map[string]map[string]any{}
	top := h.topUp(a, 10000).expect(t, 200, "Wallet topped up successfully").obj()
	delete(top, "mainBalance") // the answer's, not the record's
	answered[top["reference"].(string)] = top
	for _, ref := range []string{"dep-ok", "dep-fail-1"} {
		h.intent(a, map[string]any{"reference": ref, "amount": 700, "transactionType": "deposit"}).expect(t, 201, "")
		answered[ref] = h.verify(a, ref).expect(t, 200, "").obj()
	}
	if answered["dep-fail-1"]["status"] != "failed" || answered["dep-ok"]["status"] != "success" {
		t.Fatalf("deposits %v %v", answered["dep-ok"], answered["dep-fail-1"])
	}
	for ref, account := range map[string]string{"wd-ok": nuban(t, "058", "12", false), "wd-bad": nuban(t, "058", "34", true)} {
		h.intent(a, bankWithdrawal(ref, 1000, account)).expect(t, 201, "")
		answered[ref] = h.verify(a, ref).expect(t, 200, "").obj()
	}
	if answered["wd-ok"]["status"] != "success" || answered["wd-bad"]["status"] != "reversed" {
		t.Fatalf("withdrawals %v %v", answered["wd-ok"], answered["wd-bad"])
	}
	h.intent(a, map[string]any{"reference": "t-1", "amount": 1200.25, "transactionType": "wallet_transfer",
		"walletDetails": map[string]any{"phone": "08031110008", "narration": "lunch"}}).expect(t, 201, "")
	answered["t-1"] = h.verify(a, "t-1").expect(t, 200, "").obj()
	// Verifying again announces nothing more.
	h.verify(a, "t-1").expect(t, 200, "")
	h.verify(a, "wd-bad").expect(t, 200, "")

	hits := h.allWebhooks(rc)
	records := h.apiRecords(a, b)
	var incoming string // the receiver's side of the transfer
	for id, r := range records {
		if r["customerId"] == b {
			incoming = fmt.Sprint(r["reference"])
			if r["transactionType"] != "wallet_transfer" || r["creditType"] != "credit" || r["status"] != "success" {
				t.Fatalf("receiver record %s: %v", id, r)
			}
		}
	}
	got := paymentPayloads(t, hits, records, answered)
	want := map[string]int{
		"payment.deposit.success " + top["reference"].(string): 1,
		"payment.deposit.success dep-ok":                       1,
		"payment.deposit.failed dep-fail-1":                    1,
		"payment.withdrawal.success wd-ok":                     1,
		"payment.withdrawal.reversed wd-bad":                   1,
		"payment.wallet_transfer.success t-1":                  1,
		"payment.wallet_transfer.success " + incoming:          1,
	}
	if len(hits) != len(want) || !reflect.DeepEqual(got, want) {
		t.Fatalf("payment events\n got %v\nwant %v", got, want)
	}
}

// escrowHits indexes escrow messages by "event escrowId" and checks each
// is delivered once; order holds the arrival positions.
func escrowHits(t *testing.T, hits []hookHit) (byKey map[string]hookHit, order map[string]int) {
	t.Helper()
	byKey, order = map[string]hookHit{}, map[string]int{}
	for i, hh := range hits {
		if !strings.HasPrefix(hh.Event, "escrow.") {
			continue
		}
		k := hh.Event + " " + fmt.Sprint(hh.Data["id"])
		if _, dup := byKey[k]; dup {
			t.Fatalf("%s announced twice", k)
		}
		byKey[k], order[k] = hh, i
	}
	return byKey, order
}

func (h *harness) escrowByToken(token string) map[string]any {
	h.t.Helper()
	return h.do(req{path: "/v1/escrow/verify/" + token, key: h.std()}).expect(h.t, 200, "").obj()
}

// hookedSellerAndBuyer points the merchant's test webhook at a new
// receiver and creates a seller and a buyer topped up with 5,000 (topUpRef).
// answered collects the API's transaction records by reference (the
// top-up's first), to compare with the payment webhooks' data.
func hookedSellerAndBuyer(t *testing.T, h *harness, sellerPhone, buyerPhone string) (rc *hookReceiver, seller, buyer, topUpRef string, answered map[string]map[string]any) {
	t.Helper()
	rc = newHookReceiver(t, h.m.SigningSecrets[domain.Test], 0)
	h.do(req{method: "PUT", path: "/v1/merchant/webhook", key: h.sa(), body: map[string]any{"url": rc.srv.URL}}).expect(t, 200, "")
	seller = h.createCustomer(h.sa(), "s@x.com", sellerPhone)
	buyer = h.createCustomer(h.sa(), "b@x.com", buyerPhone)
	answered = map[string]map[string]any{}
	top := h.topUp(buyer, 5000).expect(t, 200, "").obj()
	delete(top, "mainBalance") // the answer's, not the record's
	topUpRef = top["reference"].(string)
	answered[topUpRef] = top
	return rc, seller, buyer, topUpRef, answered
}

// TestWebhooksClaimLifecycle: an escrow the seller claims after the
// delivery window yields escrow.created, escrow.ongoing and escrow.claimed
// in order, each with the escrow as the API shows it then, and the
// funding, commission and delivery records exactly as the API shows them.
func TestWebhooksClaimLifecycle(t *testing.T) {
	h := newWebhookHarness(t)
	rc, seller, buyer, topUpRef, answered := hookedSellerAndBuyer(t, h, "08035550021", "08035550022")
	e := h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer",
		"maxDelivery": "1", "deliveryTimeline": "minutes"}, 0).expect(t, 201, "").obj()
	id, token := e["id"].(string), e["paymentToken"].(string)
	created := h.escrowByToken(token)
	h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + token, key: h.sa(),
		body: map[string]any{"additionalFee": 200}}).expect(t, 200, "")
	paid := h.pay(buyer, "p-1", 1225, id).expect(t, 200, "Payment successful").obj()
	answered["p-1"] = withoutEscrows(paid)
	ongoing := h.escrowByToken(token)
	h.svc.Engine.Now = func() time.Time { return time.Now().UTC().Add(61 * time.Second) }
	h.do(req{path: "/v1/escrow/claim-funds/" + token, key: h.std(), cid: seller}).expect(t, 200, "Funds claimed successfully")
	claimed := h.escrowByToken(token)
	if claimed["status"] != "CLAIMED" {
		t.Fatalf("claimed %v", claimed)
	}

	hits := h.allWebhooks(rc)
	byKey, order := escrowHits(t, hits)
	for k, want := range map[string]map[string]any{"escrow.created " + id: created, "escrow.ongoing " + id: ongoing,
		"escrow.claimed " + id: claimed} {
		hh, ok := byKey[k]
		if !ok {
			t.Fatalf("no %s in %v", k, order)
		}
		if !reflect.DeepEqual(hh.Data, want) {
			t.Fatalf("%s payload differs from the API's escrow:\n%s\n%s", k, jsonOf(hh.Data), jsonOf(want))
		}
	}
	if len(byKey) != 3 || !(order["escrow.created "+id] < order["escrow.ongoing "+id] && order["escrow.ongoing "+id] < order["escrow.claimed "+id]) {
		t.Fatalf("escrow events %v", order)
	}
	got := paymentPayloads(t, hits, h.apiRecords(seller, buyer), answered)
	var commission, delivery string
	for _, r := range h.apiRecords() {
		switch r["transactionType"] {
		case "commission":
			commission = fmt.Sprint(r["reference"])
		case "delivery":
			delivery = fmt.Sprint(r["reference"])
		}
	}
	want := map[string]int{
		"payment.deposit.success " + topUpRef:      1,
		"payment.escrow.success p-1":               1,
		"payment.commission.success " + commission: 1,
		"payment.delivery.success " + delivery:     1,
	}
	if !reflect.DeepEqual(got, want) || len(hits) != len(want)+3 {
		t.Fatalf("payment events\n got %v\nwant %v", got, want)
	}
}

// TestWebhooksMultiUnitClone: buying one unit of a multi-unit link
// announces the clone (escrow.created, then escrow.ongoing for the clone),
// never a status change of the link, and the clone's later life.
func TestWebhooksMultiUnitClone(t *testing.T) {
	h := newWebhookHarness(t)
	rc, seller, buyer, topUpRef, answered := hookedSellerAndBuyer(t, h, "08035550031", "08035550032")
	link := h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer", "totalQuantity": "2"}, 0).
		expect(t, 201, "").obj()
	lid := link["id"].(string)
	linkCreated := h.escrowByToken(link["paymentToken"].(string))
	paid := h.pay(buyer, "unit-1", 1025, lid).expect(t, 200, "").obj()
	answered["unit-1"] = withoutEscrows(paid)
	clone := paid["escrows"].([]any)[0].(map[string]any)
	cid, ctoken := clone["id"].(string), clone["paymentToken"].(string)
	if cid == lid || clone["parentId"] != lid {
		t.Fatalf("clone %v", clone)
	}
	ongoing := h.escrowByToken(ctoken)
	h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + cid, key: h.std(), cid: buyer}).expect(t, 200, "")
	completed := h.escrowByToken(ctoken)

	hits := h.allWebhooks(rc)
	byKey, order := escrowHits(t, hits)
	if len(byKey) != 4 {
		t.Fatalf("escrow events %v", order)
	}
	for k, want := range map[string]map[string]any{"escrow.created " + lid: linkCreated, "escrow.ongoing " + cid: ongoing,
		"escrow.completed " + cid: completed} {
		if hh, ok := byKey[k]; !ok || !reflect.DeepEqual(hh.Data, want) {
			t.Fatalf("%s payload differs from the API's escrow:\n%s\n%s", k, jsonOf(hh.Data), jsonOf(want))
		}
	}
	cc, ok := byKey["escrow.created "+cid]
	if !ok {
		t.Fatalf("no escrow.created for the clone: %v", order)
	}
	if d := cc.Data; d["parentId"] != lid || d["status"] != "PENDING" || d["paymentToken"] != ctoken || d["totalQuantity"] != 1.0 || d["buyerId"] != nil {
		t.Fatalf("clone created %v", d)
	}
	if !(order["escrow.created "+cid] < order["escrow.ongoing "+cid] && order["escrow.ongoing "+cid] < order["escrow.completed "+cid]) {
		t.Fatalf("clone events out of order: %v", order)
	}
	got := paymentPayloads(t, hits, h.apiRecords(seller, buyer), answered)
	var commission string
	for _, r := range h.apiRecords() {
		if r["transactionType"] == "commission" {
			commission = fmt.Sprint(r["reference"])
		}
	}
	want := map[string]int{
		"payment.deposit.success " + topUpRef:      1,
		"payment.escrow.success unit-1":            1,
		"payment.commission.success " + commission: 1,
	}
	if !reflect.DeepEqual(got, want) || len(hits) != len(want)+4 {
		t.Fatalf("payment events\n got %v\nwant %v", got, want)
	}
}
