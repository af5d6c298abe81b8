package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/escrowd/escrowd/domain"
)

// events counts the stored events. It reads the table rather than the
// log's head: the head stops short of events committed after any
// transaction still open on the server (gap safety), and the server is
// shared by other tests.
func (h *harness) events() int64 {
	h.t.Helper()
	var n int64
	if err := h.pool.QueryRow(context.Background(), `SELECT count(*) FROM es_events`).Scan(&n); err != nil {
		h.t.Fatal(err)
	}
	return n
}

const msgBusy = "The service is busy; the change was saved, retry reading shortly"

// TestReadAfterWriteLagGives503: a write whose read model does not catch
// up within the wait timeout answers 503 (never stale data); the write is
// saved, and under an Idempotency-Key that 503 is the stored outcome: a
// retry replays it and writes nothing again.
func TestReadAfterWriteLagGives503(t *testing.T) {
	h := startHarnessWith(t, harnessOptions{waitTimeout: 300 * time.Millisecond}, nil)
	ada := h.createCustomer(h.sa(), "ada@example.com", "08031234567")
	// Stop projecting: writes are saved, their read models do not follow.
	h.projecting.stop()
	busy := `{"status":503,"message":"` + msgBusy + `","data":{}}`
	idem := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }
	create := req{method: "POST", path: "/v1/customer/create", key: h.sa(), body: customerBody("lag@example.com", "08031230000"), headers: idem("lag-1")}
	writes := []struct {
		name string
		r    req
	}{
		{"create with Idempotency-Key", create},
		{"update with Idempotency-Key", req{method: "PUT", path: "/v1/customer/update/" + ada, key: h.sa(),
			body: map[string]any{"firstname": "Adaeze"}, headers: idem("lag-2")}},
		{"block without Idempotency-Key", req{method: "PUT", path: "/v1/customer/block/" + ada, key: h.sa(), body: map[string]any{"reason": "r"}}},
	}
	first := map[string]resp{}
	for _, w := range writes {
		t.Run(w.name, func(t *testing.T) {
			before := h.events()
			r := h.do(w.r).expect(t, 503, msgBusy)
			if got := strings.TrimSpace(string(r.Raw)); got != busy {
				t.Fatalf("503 body %s, want %s", got, busy)
			}
			if h.events() == before {
				t.Fatal("the change was not saved")
			}
			first[w.name] = r
			if w.r.headers == nil {
				return
			}
			// The retry replays the stored 503 byte for byte and appends nothing.
			before = h.events()
			again := h.do(w.r)
			if again.Status != 503 || string(again.Raw) != string(r.Raw) || again.Header.Get("Idempotency-Replayed") != "true" {
				t.Fatalf("retry: %d %s (replayed %q), want the stored %s", again.Status, again.Raw, again.Header.Get("Idempotency-Replayed"), r.Raw)
			}
			if after := h.events(); after != before {
				t.Fatalf("the retry wrote: %d events -> %d", before, after)
			}
		})
	}

	// Once the projectors run again every write is visible, once.
	h.projecting.start()
	// The block was the last write: once it shows, so do the others.
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := h.do(req{path: "/v1/customer/get/" + ada, key: h.std()}).expect(t, 200, "Customer fetched successfully")
		if r.obj()["status"] == "blocked" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writes under lag never visible: %s", r.Raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.do(req{path: "/v1/customers?email=lag@example.com", key: h.std()}).expect(t, 200, "Customers fetched successfully")
	list := h.do(req{path: "/v1/customers", key: h.std()}).expect(t, 200, "Customers fetched successfully").obj()
	if rows := list["data"].([]any); len(rows) != 2 {
		t.Fatalf("%d customers, want ada and the one created under lag: %v", len(rows), rows)
	}
	got := h.do(req{path: "/v1/customer/get/" + ada, key: h.std()}).expect(t, 200, "Customer fetched successfully").obj()
	if got["firstname"] != "Adaeze" || got["status"] != "blocked" {
		t.Fatalf("writes under lag not applied: %v", got)
	}
	h.do(req{method: "POST", path: "/v1/customer/create", key: h.sa(), body: customerBody("lag@example.com", "08031230001")}).
		expect(t, 400, "A customer with this email already exists under this merchant")
	// The stored outcome stays the 503, even now that reads would succeed.
	before := h.events()
	again := h.do(create)
	if again.Status != 503 || string(again.Raw) != string(first["create with Idempotency-Key"].Raw) || again.Header.Get("Idempotency-Replayed") != "true" {
		t.Fatalf("late retry: %d %s", again.Status, again.Raw)
	}
	if after := h.events(); after != before {
		t.Fatalf("the late retry wrote: %d events -> %d", before, after)
	}
}

// TestReadyzNotReady: /readyz answers 503 "Not ready" while the projection
// lag is over MaxReadyLag or the database does not answer, and Ready again
// once the projector catches up.
func TestReadyzNotReady(t *testing.T) {
	t.Run("projection lag over MaxReadyLag", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.MaxReadyLag = 2 })
		h.do(req{path: "/readyz"}).expect(t, 200, "Ready")
		h.projecting.stop()
		h.do(req{path: "/readyz"}).expect(t, 200, "Ready") // stopped, but nothing is behind
		// A merchant is five events (created, four keys).
		if _, err := h.svc.CreateMerchant(context.Background(), "Late", false, "NG", KeyDigest); err != nil {
			t.Fatal(err)
		}
		// The lag counts up to the log's gap-safe head, which may trail
		// the commit briefly while another transaction is open on the
		// (shared) server.
		deadline := time.Now().Add(10 * time.Second)
		for {
			r := h.do(req{path: "/readyz"})
			if r.Status != 200 {
				out := notReady(t, r)
				if hz, _ := out["horizon"].(map[string]any); len(out) != 4 || out["parked"] == nil || out["database"] != "ok" || out["projectionLag"] != 5.0 || hz == nil {
					t.Fatalf("lagging: %s, want the database ok, a lag of 5 and the horizon", r.Raw)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("still ready 10 s after the projectors stopped: %s", r.Raw)
			}
			time.Sleep(20 * time.Millisecond)
		}
		h.projecting.start()
		deadline = time.Now().Add(10 * time.Second)
		for {
			r := h.do(req{path: "/readyz"})
			if r.Status == 200 {
				r.expect(t, 200, "Ready")
				if out := r.obj(); out["projectionLag"] != 0.0 || out["database"] != "ok" {
					t.Fatalf("caught up: %s", r.Raw)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("never ready again: %d %s", r.Status, r.Raw)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	t.Run("database ping fails", func(t *testing.T) {
		h := newHarness(t)
		// A pool on a port nothing listens on: its Ping fails for real.
		dead, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(dead.Close)
		r := h.readyzWith(h.runner, dead.Ping)
		if out := notReady(t, r); len(out) != 4 || out["parked"] == nil || out["database"] != "unavailable" || out["projectionLag"] != 0.0 || out["horizon"] == nil {
			t.Fatalf("got %s, want the database unavailable, no lag, and the horizon", r.Raw)
		}
	})
}

// readyzWith asks /readyz of a server like h's but with another waiter and
// database ping.
func (h *harness) readyzWith(w Waiter, ping func(context.Context) error) resp {
	h.t.Helper()
	srv := New(h.api.cfg, Deps{App: h.svc, Queries: h.api.queries, Last: h.api.last, Waiter: w, Directory: h.api.dir, Ping: ping})
	res, err := http.Get(newTestServer(h.t, srv) + "/readyz")
	if err != nil {
		h.t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	r := resp{Status: res.StatusCode, Raw: raw}
	if err := json.Unmarshal(raw, &r.Env); err != nil {
		h.t.Fatalf("%v: %s", err, raw)
	}
	r.Message, _ = r.Env["message"].(string)
	r.Data = r.Env["data"]
	return r
}

// notReady checks a /readyz refusal: 503 "Not ready" whose data reports
// what is not ready (unlike other errors' empty data).
func notReady(t *testing.T, r resp) map[string]any {
	t.Helper()
	if r.Status != 503 || r.Message != "Not ready" {
		t.Fatalf("got %d %q, want 503 \"Not ready\": %s", r.Status, r.Message, r.Raw)
	}
	out := r.obj()
	if out == nil {
		t.Fatalf("no readiness report: %s", r.Raw)
	}
	return out
}

// TestRequestLog: every request, whatever its outcome, gives exactly one
// "request" log line with its method, route template, path, status and
// duration; an unexpected error is logged as such but not sent to the client.
func TestRequestLog(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	// served counts the requests whose handling has ended, logging
	// included: once it has, nothing more is logged of it.
	var served atomic.Int64
	wrap := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer served.Add(1)
			next.ServeHTTP(w, r)
		})
	}
	h := startHarnessWith(t, harnessOptions{log: zap.New(core), wrap: wrap}, nil)
	h.api.handle(http.MethodGet, "/v1/probe/boom", Policy{CID: CIDIgnored}, func(echo.Context) error {
		return errors.New("pq: relation secret_table does not exist")
	})
	cust := h.createCustomer(h.sa(), "ada@example.com", "08031234567")
	cases := []struct {
		name          string
		r             req
		status        int
		route, path   string
		internalError bool
	}{
		{"list", req{path: "/v1/customers?limit=5", key: h.std()}, 200, "/v1/customers", "/v1/customers", false},
		{"get", req{path: "/v1/customer/get/" + cust, key: h.std()}, 200, "/v1/customer/get/:customerId", "/v1/customer/get/" + cust, false},
		{"create", req{method: "POST", path: "/v1/customer/create", key: h.sa(), body: customerBody("bob@example.com", "08031234568")},
			201, "/v1/customer/create", "/v1/customer/create", false},
		{"validation error", req{method: "PUT", path: "/v1/customer/update/" + cust, key: h.sa(), body: map[string]any{}},
			400, "/v1/customer/update/:customerId", "/v1/customer/update/" + cust, false},
		{"no key", req{path: "/v1/customers"}, 401, "/v1/customers", "/v1/customers", false},
		{"unexpected error", req{path: "/v1/probe/boom", key: h.std(), headers: map[string]string{"X-Request-Id": "trace-42"}}, 500, "/v1/probe/boom", "/v1/probe/boom", true},
		{"health", req{path: "/healthz"}, 200, "/healthz", "/healthz", false},
		{"unknown route: no template", req{path: "/v1/nothing-here"}, 404, "", "/v1/nothing-here", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			logs.TakeAll()
			if c.r.method == "" {
				c.r.method = http.MethodGet
			}
			before := served.Load()
			r := h.do(c.r)
			if r.Status != c.status {
				t.Fatalf("got %d %s, want %d", r.Status, r.Raw, c.status)
			}
			// The line is written after the response is sent: wait until
			// the request's handling has ended, so a duplicate would show.
			deadline := time.Now().Add(5 * time.Second)
			for served.Load() == before && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			lines := logs.FilterMessage("request").All()
			if len(lines) != 1 {
				t.Fatalf("%d request lines, want 1: %v", len(lines), lines)
			}
			f := lines[0].ContextMap()
			if lines[0].Level != zapcore.InfoLevel || f["method"] != c.r.method || f["route"] != c.route || f["path"] != c.path || f["status"] != int64(c.status) {
				t.Fatalf("request line %v, want %s %s %s %d", f, c.r.method, c.route, c.path, c.status)
			}
			if d, ok := f["duration"].(time.Duration); !ok || d <= 0 {
				t.Fatalf("duration %v (%T)", f["duration"], f["duration"])
			}
			// Every request has an id, made here unless the client sent one,
			// echoed and logged; an authenticated one logs who made it.
			if id := r.Header.Get("X-Request-Id"); id == "" || f["request_id"] != id {
				t.Fatalf("request id %q echoed, %v logged", id, f["request_id"])
			}
			if sent := c.r.headers["X-Request-Id"]; sent != "" && r.Header.Get("X-Request-Id") != sent {
				t.Fatalf("the client's request id %q came back as %q", sent, r.Header.Get("X-Request-Id"))
			}
			if c.r.key != "" && c.status != 401 {
				if f["merchant_id"] != h.m.MerchantID || f["environment"] != "test" || !strings.HasPrefix(fmt.Sprint(f["key_id"]), "key_") {
					t.Fatalf("request line %v lacks the merchant, key or environment", f)
				}
			} else if _, ok := f["key_id"]; ok {
				t.Fatalf("an unauthenticated request logged a key: %v", f)
			}
			failed := logs.FilterMessage("request failed").All()
			if !c.internalError {
				if len(failed) != 0 {
					t.Fatalf("a %d was logged as failed: %v", c.status, failed)
				}
				return
			}
			if len(failed) != 1 || failed[0].Level != zapcore.ErrorLevel || !strings.Contains(fmt.Sprint(failed[0].ContextMap()["error"]), "secret_table") {
				t.Fatalf("internal error not logged with its cause: %v", failed)
			}
			if ff := failed[0].ContextMap(); ff["request_id"] != f["request_id"] || ff["key_id"] != f["key_id"] || ff["merchant_id"] != h.m.MerchantID {
				t.Fatalf("the failure's line %v does not name the request %v", ff, f)
			}
			if want := `{"status":500,"message":"Internal server error","data":{}}`; strings.TrimSpace(string(r.Raw)) != want {
				t.Fatalf("500 body %s, want %s", r.Raw, want)
			}
		})
	}
}

// TestStatusOf: every domain code has its one HTTP status; anything else
// is a 500.
func TestStatusOf(t *testing.T) {
	cases := []struct {
		code domain.Code
		want int
	}{
		{domain.Invalid, 400},
		{domain.Unauthenticated, 401},
		{domain.Forbidden, 403},
		{domain.NotFound, 404},
		{domain.Conflict, 409},
		{domain.Gone, 410},
		{domain.TooLarge, 413},
		{domain.Unavailable, 503},
		{domain.Internal, 500},
		{domain.Code("no-such-code"), 500},
		{domain.Code(""), 500},
	}
	for _, c := range cases {
		if got := statusOf(c.code); got != c.want {
			t.Errorf("statusOf(%q) = %d, want %d", c.code, got, c.want)
		}
	}
}

// TestErrorEnvelopes: over HTTP, a domain error (also wrapped) is its
// code's status with its own message; any other error is a 500 whose body
// says nothing about it.
func TestErrorEnvelopes(t *testing.T) {
	h := newHarness(t)
	errs := map[string]error{
		"invalid":       domain.Invalidf("amount must be an integer of at least 1000"),
		"wrapped":       fmt.Errorf("load: %w", domain.Errorf(domain.Conflict, "Escrow changed")),
		"unauth":        domain.Errorf(domain.Unauthenticated, "Access denied"),
		"forbidden":     domain.Errorf(domain.Forbidden, "Unauthorized IP address"),
		"notfound":      domain.Errorf(domain.NotFound, "Customer not found"),
		"gone":          domain.Errorf(domain.Gone, "Use escrow"),
		"toolarge":      domain.Errorf(domain.TooLarge, "Request body too large"),
		"busy":          domain.Errorf(domain.Unavailable, msgBusy),
		"plain":         errors.New("pq: password authentication failed for user escrowd"),
		"wrapped-plain": fmt.Errorf("projections: %w", pgx.ErrNoRows),
		"context":       context.DeadlineExceeded,
	}
	h.api.handle(http.MethodGet, "/v1/probe/err/:which", Policy{CID: CIDIgnored}, func(c echo.Context) error {
		return errs[c.Param("which")]
	})
	cases := []struct {
		which   string
		status  int
		message string
	}{
		{"invalid", 400, "amount must be an integer of at least 1000"},
		{"wrapped", 409, "Escrow changed"},
		{"unauth", 401, "Access denied"},
		{"forbidden", 403, "Unauthorized IP address"},
		{"notfound", 404, "Customer not found"},
		{"gone", 410, "Use escrow"},
		{"toolarge", 413, "Request body too large"},
		{"busy", 503, msgBusy},
		{"plain", 500, "Internal server error"},
		{"wrapped-plain", 500, "Internal server error"},
		{"context", 500, "Internal server error"},
	}
	for _, c := range cases {
		t.Run(c.which, func(t *testing.T) {
			r := h.do(req{path: "/v1/probe/err/" + c.which, key: h.std()}).expect(t, c.status, c.message)
			if c.status == 500 && strings.Contains(string(r.Raw), errs[c.which].Error()) {
				t.Fatalf("500 leaks the error: %s", r.Raw)
			}
		})
	}
}

// chunked is a reader of unknown length: the client sends it with
// Transfer-Encoding: chunked and no Content-Length.
type chunked struct{ io.Reader }

// TestChunkedBodyOverLimit: a body without Content-Length is cut at the
// JSON limit while it is read, with 413, with or without Idempotency-Key.
func TestChunkedBodyOverLimit(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.JSONBodyLimit = 1024 })
	big := `{"firstname":"` + strings.Repeat("a", 4096) + `","lastname":"Obi","email":"big@example.com","phone":"08031234567"}`
	small := `{"firstname":"Ada","lastname":"Obi","email":"small@example.com","phone":"08031234568"}`
	cases := []struct {
		name    string
		body    string
		headers map[string]string
		status  int
		message string
	}{
		{"over the limit", big, nil, 413, "Request body too large"},
		{"over the limit, Idempotency-Key", big, map[string]string{"Idempotency-Key": "big-1"}, 413, "Request body too large"},
		{"under the limit", small, nil, 201, "Customer created successfully"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h.do(req{method: "POST", path: "/v1/customer/create", key: h.sa(), headers: c.headers,
				body: chunked{strings.NewReader(c.body)}}).expect(t, c.status, c.message)
		})
	}
	h.do(req{path: "/v1/customers?email=big@example.com", key: h.std()}).expect(t, 400, "No customer found with the provided email")
	// The refused key was not kept: it can be used for a request that fits.
	h.do(req{method: "POST", path: "/v1/customer/create", key: h.sa(), headers: map[string]string{"Idempotency-Key": "big-1"},
		body: customerBody("after@example.com", "08031234569")}).expect(t, 201, "Customer created successfully")
}
