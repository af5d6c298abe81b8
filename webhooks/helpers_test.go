package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/projections"
)

// testEnv is one fresh database with the event store, the command service
// and the outbox.
type testEnv struct {
	t     *testing.T
	url   string
	pool  *pgxpool.Pool
	store *postgres.Store
	svc   *app.Service
	box   *Outbox

	mu   sync.Mutex
	last eventstore.Position // of the latest append by deposits
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	url := pgtest.NewURL(t)
	pool := pgtest.OpenPool(t, url)
	store := postgres.New(pool)
	t.Cleanup(store.Close)
	return &testEnv{t: t, url: url, pool: pool, store: store, svc: app.NewService(app.NewEngine(store, 1000)), box: NewOutbox(pool)}
}

func digest(k string) string { return "d-" + k }

// merchant creates a merchant whose test callback URL is url ("" for none).
func (e *testEnv) merchant(url string) app.CreatedMerchant {
	e.t.Helper()
	m, err := e.svc.CreateMerchant(context.Background(), "Shop", true, "NG", digest)
	if err != nil {
		e.t.Fatal(err)
	}
	if url != "" {
		e.setURL(m.MerchantID, domain.Test, url)
	}
	return m
}

func (e *testEnv) setURL(merchantID string, env domain.Environment, url string) {
	e.t.Helper()
	if _, err := e.svc.UpdateMerchant(context.Background(), merchantID, func(merchant.State) ([]domain.Event, error) {
		return []domain.Event{merchant.WebhookURLSet{Environment: env, URL: url}}, nil
	}); err != nil {
		e.t.Fatal(err)
	}
}

// deposits appends n settled top-ups of merchantID (test environment), each
// in its own append as the service writes them, and returns the ids of the
// messages they announce.
func (e *testEnv) deposits(merchantID string, n int) []uuid.UUID {
	e.t.Helper()
	return e.depositsIn(merchantID, domain.Test, n)
}

func (e *testEnv) depositsIn(merchantID string, env domain.Environment, n int) []uuid.UUID {
	e.t.Helper()
	ids := make([]uuid.UUID, 0, n)
	for i := 0; i < n; i++ {
		sa, id := topUpAppend(merchantID, env)
		res, err := e.store.Append(context.Background(), sa)
		if err != nil {
			e.t.Fatal(err)
		}
		e.mu.Lock()
		if e.last.Less(res.Position) {
			e.last = res.Position
		}
		e.mu.Unlock()
		ids = append(ids, id)
	}
	return ids
}

// topUpAppend is the payment stream of one settled top-up (pending record,
// then settled) and the id of the message announcing it.
func topUpAppend(merchantID string, env domain.Environment) (eventstore.StreamAppend, uuid.UUID) {
	id := uuid.Must(uuid.NewV7()).String()
	created, settled, err := payment.TopUp(payment.Intent{ID: id, Reference: "TOPUP-" + id, Amount: money.Naira(5000),
		CustomerID: "cus-" + id, MerchantID: merchantID, Environment: env, At: time.Now().UTC()})
	if err != nil {
		panic(err)
	}
	c, _ := json.Marshal(created)
	s, _ := json.Marshal(settled)
	return eventstore.StreamAppend{Stream: "payment-" + payment.StreamID(merchantID, env, "TOPUP-"+id), Expected: eventstore.NoStream,
		Events: []eventstore.EventData{
			{ID: uuid.New(), Type: created.EventType(), Data: c},
			{ID: uuid.New(), Type: settled.EventType(), Data: s},
		}}, PaymentMessageID(settled.Records[0])
}

// runSubscriber runs the subscriber with its own runner until the test ends
// (or stop is called).
func (e *testEnv) runSubscriber(pool *pgxpool.Pool) (stop func()) {
	e.t.Helper()
	return e.runSubscriberHandingTo(pool, nil)
}

// runSubscriberHandingTo runs the subscriber with handoff (nil: none) as
// its Handoff.
func (e *testEnv) runSubscriberHandingTo(pool *pgxpool.Pool, handoff *Dispatcher) (stop func()) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sub := newSubscriber(e.store, pool)
	sub.Handoff = handoff
	r, err := newSubscriberRunner(ctx, e.store, pool, sub)
	if err != nil {
		e.t.Fatal(err)
	}
	r.LockRetry = 50 * time.Millisecond
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	e.t.Cleanup(stop)
	return stop
}

// fastSchedule retries quickly, four times.
var fastSchedule = []time.Duration{20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond}

// runDispatcher runs a dispatcher on pool until the test ends (or stop).
func (e *testEnv) runDispatcher(pool *pgxpool.Pool, mutate ...func(*Dispatcher)) (d *Dispatcher, stop func()) {
	e.t.Helper()
	// The receivers listen on loopback: AllowPrivate, as the operator's
	// ESCROW_WEBHOOK_ALLOW_PRIVATE does (tests of the guard turn it off).
	d = &Dispatcher{Pool: pool, Endpoints: endpointsOf(e.store), PollInterval: 20 * time.Millisecond,
		Schedule: fastSchedule, Rand: func() float64 { return 0.5 }, AllowPrivate: true}
	for _, m := range mutate {
		m(d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := d.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			e.t.Errorf("dispatcher stopped: %v", err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	e.t.Cleanup(stop)
	return d, stop
}

// senderHeader names the test process a request came from.
const senderHeader = "X-Test-Sender"

// hit is one request a receiver got; Status is -1 while the receiver has
// not answered yet.
type hit struct {
	ID, Event string
	Attempt   string
	Sender    string // senderHeader, set by test dispatchers that name themselves
	Sig       string
	SigOK     bool
	Status    int
	At        time.Time
	Body      []byte
}

// receiver is a real HTTP receiver that records every request as it
// arrives; respond decides the status of each (default 200).
type receiver struct {
	srv     *httptest.Server
	mu      sync.Mutex
	hits    []hit
	secret  func() string
	respond func(h hit) int
}

func newReceiver(t *testing.T, secret func() string, respond func(h hit) int) *receiver {
	r := &receiver{secret: secret, respond: respond}
	r.srv = httptest.NewServer(r.handler())
	t.Cleanup(r.srv.Close)
	return r
}

// newTLSReceiver is newReceiver over https (a self-signed certificate for
// 127.0.0.1, which r.srv.Client() and r.srv.Certificate() trust), as live
// callbacks need.
func newTLSReceiver(t *testing.T, secret func() string, respond func(h hit) int) *receiver {
	r := &receiver{secret: secret, respond: respond}
	r.srv = httptest.NewTLSServer(r.handler())
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var env Envelope
		_ = json.Unmarshal(body, &env)
		h := hit{ID: env.ID, Event: env.Event, Attempt: req.Header.Get(AttemptHeader), Sender: req.Header.Get(senderHeader), At: time.Now(), Body: body,
			Sig: req.Header.Get(SignatureHeader), Status: -1,
			SigOK: req.Header.Get("User-Agent") == UserAgent && req.Header.Get("Content-Type") == "application/json" &&
				(r.secret == nil || Verify(r.secret(), body, req.Header.Get(SignatureHeader)))}
		r.mu.Lock()
		i := len(r.hits)
		r.hits = append(r.hits, h)
		r.mu.Unlock()
		status := 200
		if r.respond != nil {
			status = r.respond(h)
		}
		r.mu.Lock()
		r.hits[i].Status = status
		r.mu.Unlock()
		if status <= 0 {
			status = http.StatusServiceUnavailable
		}
		w.WriteHeader(status)
	})
}

func (r *receiver) all() []hit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hit(nil), r.hits...)
}

// delivered returns the ids answered with 2xx, with their counts.
func (r *receiver) delivered() map[string]int {
	out := map[string]int{}
	for _, h := range r.all() {
		if h.Status >= 200 && h.Status < 300 {
			out[h.ID]++
		}
	}
	return out
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// statuses counts outbox rows by status.
func (e *testEnv) statuses() map[string]int {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT status, count(*) FROM webhook_deliveries GROUP BY status`)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			e.t.Fatal(err)
		}
		out[s] = n
	}
	return out
}

// loggedAttempts is every delivery's attempt log as rows (delivery_id,
// attempt), as attachAttempts reads it: the earlier attempts in
// webhook_attempts and the last one on the delivery row.
const loggedAttempts = `(SELECT delivery_id, attempt FROM webhook_attempts
	UNION SELECT id, last_attempt FROM webhook_deliveries WHERE last_attempt IS NOT NULL)`

func secretOf(m app.CreatedMerchant) func() string {
	return func() string { return m.SigningSecrets[domain.Test] }
}

// The webhook role as the wiring (internal/wiring) assembles it, which
// these tests cannot import (it imports webhooks): the subscriber's
// category lookup from the read models, the endpoints from the
// application, and the subscriber's own runner after Install.

func newSubscriber(store eventstore.Store, pool *pgxpool.Pool) *Subscriber {
	return NewSubscriber(store, projections.NewQueries(pool, nil).EscrowCategory)
}

func endpointsOf(store eventstore.Store) Endpoints {
	return MerchantEndpoints{Merchants: app.NewService(app.NewEngine(store, 1000))}
}

func newSubscriberRunner(ctx context.Context, store eventstore.Store, pool *pgxpool.Pool, sub *Subscriber) (*projections.Runner, error) {
	if _, err := Install(ctx, store, pool); err != nil {
		return nil, err
	}
	return projections.NewRunner(store, pool, zap.NewNop(), sub), nil
}

// redeliver asks for another delivery of id as the API does: the
// application's command records the request, which the running subscriber
// acts on.
func (e *testEnv) redeliver(merchantID string, env domain.Environment, id string) (Delivery, error) {
	var d Delivery
	_, err := e.svc.RequestRedelivery(context.Background(), app.Actor{MerchantID: merchantID, Environment: env},
		func(ctx context.Context) (app.Redeliverable, error) {
			var n int
			var err error
			d, n, err = e.box.Redeliverable(ctx, merchantID, env, id)
			return app.Redeliverable{ID: d.ID, Event: d.Event, EscrowID: d.EscrowID, Redelivered: n}, err
		})
	return d, err
}
