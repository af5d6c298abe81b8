package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/dashauth"
	"github.com/escrowd/escrowd/internal/keyring"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/internal/sealing"
	"github.com/escrowd/escrowd/projections"
)

// harness is the whole service (event store, projectors, API) on a fresh
// database behind a real HTTP listener.
type harness struct {
	t      *testing.T
	srv    *httptest.Server
	api    *Server
	svc    *app.Service
	runner *projections.Runner
	// projecting runs the runner; tests stop it to make the read models lag.
	projecting *runnerControl
	m          app.CreatedMerchant
	pool       *pgxpool.Pool
	// store is the event store: PostgreSQL in the harness's database, or
	// the KurrentDB adapter for the tests runOnKurrent runs, under the
	// sealing codec whose data keys are keys'.
	store eventstore.Store
	keys  *keyring.Keyring
}

const liveHost = "api.escrowd.test"

func newHarness(t *testing.T, mutate ...func(*Config)) *harness {
	t.Helper()
	return startHarness(t, nil, mutate...)
}

// startHarness builds the harness; also (when not nil) returns more loops
// to run beside the projection runner (the webhook role) until the test
// ends.
func startHarness(t *testing.T, also func(ctx context.Context, store eventstore.Store, pool *pgxpool.Pool) []func(context.Context) error,
	mutate ...func(*Config)) *harness {
	t.Helper()
	return startHarnessWith(t, harnessOptions{}, also, mutate...)
}

// testMaster is a fresh master key, as ESCROW_MASTER_KEY_FILE holds one.
func testMaster(t *testing.T) keyring.Master {
	t.Helper()
	m, err := keyring.GenerateMaster()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// harnessOptions tune the parts of the harness that Config does not reach.
type harnessOptions struct {
	// log is the API's logger (default: none).
	log *zap.Logger
	// waitTimeout bounds the API's wait for the read models while the
	// test has stopped the projectors (h.projecting.stop), so reads after
	// writes give up (503) quickly. While the projectors run, the API
	// waits the runner's default: a loaded host must not turn a test's
	// set-up writes into 503s.
	waitTimeout time.Duration
	// limits are the HTTP server's (default DefaultLimits, as serve has).
	limits *Limits
	// projectors replaces the runner's projectors (default
	// projections.All); parkAfter, when set, is the runner's ParkAfter.
	projectors []projections.Projector
	parkAfter  int
	// wrap, when set, wraps the HTTP server's handler (to see when a
	// request's handling has ended, say).
	wrap func(http.Handler) http.Handler
}

func startHarnessWith(t *testing.T, o harnessOptions, also func(ctx context.Context, store eventstore.Store, pool *pgxpool.Pool) []func(context.Context) error,
	mutate ...func(*Config)) *harness {
	t.Helper()
	pool := pgtest.NewPool(t)
	store, ring := harnessStore(t, pool)
	ctx, cancel := context.WithCancel(context.Background())
	ps := o.projectors
	if ps == nil {
		ps = projections.All(wired.Sealer(store))
	}
	runner := projections.NewRunner(store, pool, zap.NewNop(), ps...)
	runner.ParkAfter = o.parkAfter
	projecting := &runnerControl{runner: runner}
	var waiter Waiter = runner
	if o.waitTimeout > 0 {
		waiter = stoppedFence{Runner: runner, stopped: &projecting.stopped, timeout: o.waitTimeout}
	}
	projecting.start()
	var loops []func(context.Context) error
	if also != nil {
		loops = append(loops, also(ctx, store, pool)...)
	}
	var wg sync.WaitGroup
	for _, run := range loops {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run(ctx) }()
	}
	t.Cleanup(func() { projecting.stop(); cancel(); wg.Wait() })
	// The listener comes first so uploaded files get URLs on this server.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Hosts: map[string]domain.Environment{liveHost: domain.Live}, DefaultEnvironment: domain.Test,
		PublicURL: "http://" + l.Addr().String(),
		// Tests of other packages hold transactions open on the shared
		// server; only TestReadyzReportsHeldHorizon tests this limit.
		MaxReadyHorizon: time.Minute,
		Dashboard:       dashauth.NewStore(pool, ring)}
	for _, m := range mutate {
		m(&cfg)
	}
	log := o.log
	if log == nil {
		log = zap.NewNop()
	}
	api := wired.API(cfg, store, pool, waiter, log, nil)
	t.Cleanup(api.Close)
	wg.Add(1)
	go func() { defer wg.Done(); _ = api.ProviderEvents().Run(ctx) }()
	h := &harness{t: t, api: api, svc: api.App(), runner: runner, projecting: projecting, pool: pool, store: store, keys: ring}
	limits := DefaultLimits
	if o.limits != nil {
		limits = *o.limits
	}
	h.srv = &httptest.Server{Listener: l, Config: api.HTTPServer("", limits)}
	if o.wrap != nil {
		h.srv.Config.Handler = o.wrap(h.srv.Config.Handler)
	}
	h.srv.Start()
	t.Cleanup(h.srv.Close)
	t.Cleanup(h.eventsDecodeAsEncodingJSONDoes)
	h.m = h.newMerchant(true)
	return h
}

// eventKinds are the registries of the aggregate streams, by stream prefix.
var eventKinds = map[string]domain.Registry{
	app.MerchantKind.Name: app.MerchantKind.Registry, app.CustomerKind.Name: app.CustomerKind.Registry,
	app.ReservationKind.Name: app.ReservationKind.Registry, app.WhitelistKind.Name: app.WhitelistKind.Registry,
	app.WalletKind.Name: app.WalletKind.Registry, app.PaymentKind.Name: app.PaymentKind.Registry,
	app.EscrowKind.Name: app.EscrowKind.Registry, app.CategoryKind.Name: app.CategoryKind.Registry,
	app.CategoryOrderKind.Name:   app.CategoryOrderKind.Registry,
	app.CheckoutKind.Name:        app.CheckoutKind.Registry,
	app.PayoutLinkKind.Name:      app.PayoutLinkKind.Registry,
	app.RecipientKind.Name:       app.RecipientKind.Registry,
	app.DepositAccountKind.Name:  app.DepositAccountKind.Registry,
	app.AccountLinkKind.Name:     app.AccountLinkKind.Registry,
	app.ChargeKind.Name:          app.ChargeKind.Registry,
	app.WebhookDeliveryKind.Name: app.WebhookDeliveryKind.Registry,
}

// eventsDecodeAsEncodingJSONDoes: every aggregate event the test stored
// decodes with the domain's codec (domain.Unmarshal, encoding/json's
// behaviour on the json/v2 engine) exactly as the standard library's
// encoding/json decodes it. Run after every end-to-end test, so the whole
// suite's events are compared.
func (h *harness) eventsDecodeAsEncodingJSONDoes() {
	t := h.t
	compared := 0
	for e := range h.storedEvents() {
		stream, typ, data := e.Stream, e.Type, string(e.Data)
		kind, _, _ := strings.Cut(stream, "-")
		reg, ok := eventKinds[kind]
		if !ok {
			continue // idempotency reservation streams
		}
		got, err := reg.Decode(typ, []byte(data))
		if err != nil {
			t.Errorf("%s %s: %v", stream, typ, err)
			continue
		}
		want := reg[typ]()
		if err := json.Unmarshal([]byte(data), want); err != nil {
			t.Errorf("%s %s: encoding/json: %v", stream, typ, err)
			continue
		}
		if w := reflect.ValueOf(want).Elem().Interface(); !reflect.DeepEqual(got, w) {
			t.Errorf("%s %s decodes to\n%#v\nencoding/json decodes it to\n%#v", stream, typ, got, w)
		}
		compared++
	}
	if compared == 0 {
		t.Error("no event compared: the merchant's own events at least should be")
	}
	// The escrow states the read model stores decode alike too
	// (projections read them back with domain.Unmarshal).
	states, err := h.pool.Query(context.Background(), `SELECT id, state::text FROM rm_escrows`)
	if err != nil {
		t.Fatal(err)
	}
	defer states.Close()
	for states.Next() {
		var id, doc string
		if err := states.Scan(&id, &doc); err != nil {
			t.Fatal(err)
		}
		var got, want escrow.State
		if err := domain.Unmarshal([]byte(doc), &got); err != nil {
			t.Errorf("escrow %s state: %v", id, err)
			continue
		}
		if err := json.Unmarshal([]byte(doc), &want); err != nil {
			t.Errorf("escrow %s state: encoding/json: %v", id, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("escrow %s state decodes to\n%#v\nencoding/json decodes it to\n%#v", id, got, want)
		}
	}
	if err := states.Err(); err != nil {
		t.Fatal(err)
	}
}

// storedEvents yields every event the test stored (stream, type and data
// at least).
func (h *harness) storedEvents() iter.Seq[eventstore.RecordedEvent] {
	return func(yield func(eventstore.RecordedEvent) bool) {
		t := h.t
		if _, ok := underCodec(h.store).(*postgres.Store); !ok {
			// Another store has no table to read: its log, once every
			// write is readable.
			after := eventstore.Start
			for {
				evs, err := h.store.ReadAll(context.Background(), after, 1000)
				if err != nil {
					t.Fatal(err)
				}
				if len(evs) == 0 {
					return
				}
				for _, e := range evs {
					if !yield(e) {
						return
					}
				}
				after = evs[len(evs)-1].Position
			}
		}
		// The table, not ReadAll: PostgreSQL's horizon may hold recent
		// events back while another test's transaction is open.
		rows, err := h.pool.Query(context.Background(), `SELECT stream_id, event_type, data::text FROM es_events`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var stream, typ, data string
			if err := rows.Scan(&stream, &typ, &data); err != nil {
				t.Fatal(err)
			}
			opened, err := sealing.OpenEvent(context.Background(), h.keys, typ, []byte(data))
			if err != nil {
				t.Fatal(err)
			}
			if !yield(eventstore.RecordedEvent{Stream: stream, Type: typ, Data: opened}) {
				return
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// runnerControl runs a projection runner until stopped; it can be started
// again (the runner resumes from its stored checkpoints).
type runnerControl struct {
	runner  *projections.Runner
	cancel  context.CancelFunc
	done    chan struct{}
	stopped atomic.Bool // read by the API's requests (stoppedFence)
}

// stoppedFence is the runner as the API's read fence, except that while
// the test has stopped the projectors a wait gives up after timeout with
// the runner's own error (ErrLagging), as a lagging runner would.
type stoppedFence struct {
	*projections.Runner
	stopped *atomic.Bool
	timeout time.Duration
}

func (f stoppedFence) WaitFor(ctx context.Context, pos eventstore.Position, names ...string) error {
	if !f.stopped.Load() {
		return f.Runner.WaitFor(ctx, pos, names...)
	}
	short, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	err := f.Runner.WaitFor(short, pos, names...)
	if err != nil && ctx.Err() == nil && short.Err() != nil {
		return fmt.Errorf("%w: the test stopped the projectors (%v)", projections.ErrLagging, err)
	}
	return err
}

func (rc *runnerControl) start() {
	if rc.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	rc.cancel, rc.done = cancel, make(chan struct{})
	rc.stopped.Store(false)
	go func(done chan struct{}) { defer close(done); _ = rc.runner.Run(ctx) }(rc.done)
}

// stop ends the runner and waits until it has released its projectors.
func (rc *runnerControl) stop() {
	if rc.cancel == nil {
		return
	}
	rc.stopped.Store(true)
	rc.cancel()
	<-rc.done
	rc.cancel = nil
}

func (h *harness) newMerchant(business bool) app.CreatedMerchant {
	h.t.Helper()
	m, err := h.svc.CreateMerchant(context.Background(), "Shop", business, "NG", KeyDigest)
	if err != nil {
		h.t.Fatal(err)
	}
	h.wait(m.Position)
	return m
}

func (h *harness) wait(pos eventstore.Position) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The runner gives up after its WaitTimeout (5 s): keep waiting until
	// the deadline.
	for {
		err := h.runner.WaitFor(ctx, pos)
		if err == nil {
			return
		}
		if !errors.Is(err, projections.ErrLagging) || ctx.Err() != nil {
			h.t.Fatal(err)
		}
	}
}

// key returns the merchant's key of env and role.
func key(m app.CreatedMerchant, env domain.Environment, role merchant.Role) string {
	for _, k := range m.Keys {
		if k.Environment == env && k.Role == role {
			return k.Key
		}
	}
	panic("no such key")
}

func (h *harness) sa() string  { return key(h.m, domain.Test, merchant.SuperAdmin) }
func (h *harness) std() string { return key(h.m, domain.Test, merchant.Standard) }

type req struct {
	method, path, key, cid, host string
	body                         any
	headers                      map[string]string
	// document: the answer is a document of its own (the API reference),
	// not the envelope.
	document bool
}

type resp struct {
	Status  int
	Header  http.Header
	Raw     []byte
	Env     map[string]any
	Message string
	Data    any
}

func (h *harness) do(r req) resp {
	h.t.Helper()
	var body io.Reader
	switch b := r.body.(type) {
	case nil:
	case string:
		body = strings.NewReader(b)
	case []byte:
		body = bytes.NewReader(b)
	case io.Reader:
		// A reader of unknown length: the client sends it chunked, with
		// no Content-Length.
		body = b
	default:
		raw, _ := json.Marshal(b)
		body = bytes.NewReader(raw)
	}
	hr, err := http.NewRequest(r.method, h.srv.URL+r.path, body)
	if err != nil {
		h.t.Fatal(err)
	}
	if r.key != "" {
		hr.Header.Set("Authorization", "Bearer "+r.key)
	}
	if r.cid != "" {
		hr.Header.Set("customer-id", r.cid)
	}
	if r.host != "" {
		hr.Host = r.host
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	for k, v := range r.headers {
		hr.Header.Set(k, v)
	}
	res, err := h.client().Do(hr)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	out := resp{Status: res.StatusCode, Header: res.Header, Raw: raw}
	if err := json.Unmarshal(raw, &out.Env); err == nil {
		out.Message, _ = out.Env["message"].(string)
		out.Data = out.Env["data"]
		if st, ok := out.Env["status"].(float64); !r.document && (!ok || int(st) != res.StatusCode) {
			h.t.Errorf("%s %s: envelope status %v != HTTP %d", r.method, r.path, out.Env["status"], res.StatusCode)
		}
	}
	return out
}

// expect asserts status and message.
func (r resp) expect(t *testing.T, status int, message string) resp {
	t.Helper()
	if r.Status != status || (message != "" && r.Message != message) {
		t.Fatalf("got %d %q, want %d %q; body %s", r.Status, r.Message, status, message, r.Raw)
	}
	if status >= 400 && status != 429 {
		if d, ok := r.Data.(map[string]any); !ok || len(d) != 0 {
			t.Fatalf("error data must be {}: %s", r.Raw)
		}
	}
	return r
}

func (r resp) obj() map[string]any {
	m, _ := r.Data.(map[string]any)
	return m
}

// probe registers an extra route with a policy, to test the auth chain on
// every CID rule.
func (h *harness) probe(method, path string, pol Policy) {
	h.api.handle(method, path, pol, func(c echo.Context) error {
		out := map[string]any{}
		if cu, ok := CustomerFrom(c); ok {
			out["customerId"] = cu.ID
		}
		return respond(c, http.StatusOK, "ok", out)
	})
}

func mustCIDRs(s ...string) []*net.IPNet {
	var out []*net.IPNet
	for _, c := range s {
		_, n, err := net.ParseCIDR(c)
		if err != nil {
			panic(err)
		}
		out = append(out, n)
	}
	return out
}

func newTestServer(t *testing.T, s *Server) string {
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// createCustomer creates a customer through the API and returns its id.
func (h *harness) createCustomer(key, email, phone string) string {
	h.t.Helper()
	r := h.do(req{method: "POST", path: "/v1/customer/create", key: key,
		body: map[string]any{"firstname": "Ada", "lastname": "Obi", "email": email, "phone": phone}})
	r.expect(h.t, 201, "Customer created successfully")
	return r.obj()["customerId"].(string)
}

// caughtUp waits, as a read through the API does, until the read models
// include every write acknowledged so far: for tests that read the read
// models' tables directly.
func (h *harness) caughtUp() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pos, err := h.store.Last(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	h.wait(pos)
}
