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
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/webhooks"
)

// newWebhookHarness is newHarness with the webhook role running too: the
// subscriber (its own runner) and a dispatcher with a fast retry schedule.
func newWebhookHarness(t *testing.T, mutate ...func(*Config)) *harness {
	t.Helper()
	return startHarness(t, func(ctx context.Context, store *postgres.Store, pool *pgxpool.Pool) []func(context.Context) error {
		hooks, err := webhooks.NewRunner(ctx, store, pool, zap.NewNop(), webhooks.NewSubscriber(store, pool))
		if err != nil {
			t.Fatal(err)
		}
		d := &webhooks.Dispatcher{Pool: pool, Endpoints: &webhooks.StoreEndpoints{Store: store},
			PollInterval: 20 * time.Millisecond, Schedule: []time.Duration{30 * time.Millisecond, 30 * time.Millisecond, 30 * time.Millisecond}}
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

func (r *hookReceiver) waitFor(t *testing.T, n int) []hookHit {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := r.delivered()
		if len(got) >= n {
			time.Sleep(100 * time.Millisecond) // nothing more may arrive
			return r.delivered()
		}
		if time.Now().After(deadline) {
			t.Fatalf("got %d webhooks, want %d: %+v", len(got), n, got)
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

	hits := rc.waitFor(t, 9)
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
	hits := rc.waitFor(t, 1)
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
	if r["id"] != id {
		t.Fatalf("retry %v", r)
	}
	hits = rc.waitFor(t, 2)
	if hits[1].ID != id || hits[1].Attempt != "4" {
		t.Fatalf("redelivery %+v", hits[1])
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
	h := newWebhookHarness(t)
	put := func(k, host string, body any) resp {
		return h.do(req{method: "PUT", path: "/v1/merchant/webhook", key: k, host: host, body: body})
	}
	put(h.sa(), "", map[string]any{}).expect(t, 400, "url is required")
	put(h.sa(), "", map[string]any{"url": 5}).expect(t, 400, "url must be a string")
	put(h.sa(), "", map[string]any{"url": "not a url"}).expect(t, 400, "url must be an absolute http(s) URL")
	put(h.std(), "", map[string]any{"url": "http://localhost:1"}).expect(t, 401, "Access denied")
	// Test callbacks may be local and plain http.
	put(h.sa(), "", map[string]any{"url": "http://localhost:9000/cb"}).expect(t, 200, "")
	live := key(h.m, domain.Live, merchant.SuperAdmin)
	put(live, liveHost, map[string]any{"url": "http://hooks.example.com/cb"}).expect(t, 400, "A live callback URL must use https")
	put(live, liveHost, map[string]any{"url": "https://127.0.0.1/cb"}).
		expect(t, 400, "A live callback URL may not point to a private or loopback address")
	put(live, liveHost, map[string]any{"url": "https://10.1.2.3/cb"}).
		expect(t, 400, "A live callback URL may not point to a private or loopback address")
	put(live, liveHost, map[string]any{"url": "https://93.184.216.34/cb"}).expect(t, 200, "")
	// Environments are separate.
	if g := h.do(req{path: "/v1/merchant/webhook", key: live, host: liveHost}).expect(t, 200, "").obj(); g["url"] != "https://93.184.216.34/cb" || g["environment"] != "live" {
		t.Fatalf("live %v", g)
	}
	if g := h.do(req{path: "/v1/merchant/webhook", key: h.sa()}).expect(t, 200, "").obj(); g["url"] != "http://localhost:9000/cb" {
		t.Fatalf("test %v", g)
	}
	// Clearing.
	put(h.sa(), "", map[string]any{"url": nil}).expect(t, 200, "")
	if g := h.do(req{path: "/v1/merchant/webhook", key: h.sa()}).expect(t, 200, "").obj(); g["url"] != nil {
		t.Fatalf("cleared %v", g)
	}

	// The operator may allow private live callbacks.
	hp := newWebhookHarness(t, func(c *Config) { c.WebhookAllowPrivate = true })
	hp.do(req{method: "PUT", path: "/v1/merchant/webhook", key: key(hp.m, domain.Live, merchant.SuperAdmin), host: liveHost,
		body: map[string]any{"url": "https://127.0.0.1/cb"}}).expect(t, 200, "")
	hp.do(req{method: "PUT", path: "/v1/merchant/webhook", key: key(hp.m, domain.Live, merchant.SuperAdmin), host: liveHost,
		body: map[string]any{"url": "http://127.0.0.1/cb"}}).expect(t, 400, "A live callback URL must use https")
}
