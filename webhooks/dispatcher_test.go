package webhooks

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/projections"
	"github.com/escrowd/escrowd/view"
)

func TestSubscriberStartsAtInstallAndEnqueuesOnce(t *testing.T) {
	e := newTestEnv(t)
	m := e.merchant("http://127.0.0.1:1/unused")
	e.deposits(m.MerchantID, 3) // history before webhooks were turned on
	// The head is what ReadAll can return: it moves past those appends
	// once no older transaction of the cluster is still open.
	eventually(t, 10*time.Second, "head past the history", func() bool {
		head, err := e.store.Head(context.Background())
		return err == nil && head.AtLeast(e.last)
	})
	e.runSubscriber(e.pool)
	want := e.deposits(m.MerchantID, 5)
	eventually(t, 10*time.Second, "5 enqueued messages", func() bool { return e.statuses()[StatusPending] == 5 })
	rows, _ := e.pool.Query(context.Background(), `SELECT id FROM webhook_deliveries`)
	got, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatal(err)
	}
	wantSet := map[uuid.UUID]bool{}
	for _, id := range want {
		wantSet[id] = true
	}
	for _, id := range got {
		if !wantSet[id] {
			t.Fatalf("message %s of history before install was enqueued", id)
		}
	}
	// Replaying the whole log (as after a crash between enqueue and
	// checkpoint, which the shared transaction rules out anyway) adds
	// nothing: message ids are deterministic.
	events, err := e.store.ReadAll(context.Background(), eventstore.Start, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	sub := newSubscriber(e.store, e.pool)
	if err := pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
		return sub.Apply(context.Background(), tx, events)
	}); err != nil {
		t.Fatal(err)
	}
	if n := e.statuses()[StatusPending]; n != 8 {
		t.Fatalf("replay: %d rows, want 8 (5 + the 3 from before install, each once)", n)
	}
	if err := pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
		return sub.Apply(context.Background(), tx, events)
	}); err != nil {
		t.Fatal(err)
	}
	if n := e.statuses()[StatusPending]; n != 8 {
		t.Fatalf("second replay: %d rows, want 8", n)
	}
	// The checkpoint is the subscriber's own, not a read model's.
	for _, p := range projections.All(nil) {
		if p.Name() == SubscriberName {
			t.Fatal("the webhook subscriber must not be rebuildable with the read models")
		}
	}
}

func TestReceiverFailingThenRecoveringGetsEverything(t *testing.T) {
	e := newTestEnv(t)
	var m app.CreatedMerchant
	rc := newReceiver(t, func() string { return m.SigningSecrets[domain.Test] }, func(h hit) int {
		if n, _ := strconv.Atoi(h.Attempt); n <= 3 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	m = e.merchant(rc.srv.URL + "/hooks")
	e.runSubscriber(e.pool)
	e.runDispatcher(e.pool)
	ids := e.deposits(m.MerchantID, 10)
	eventually(t, 20*time.Second, "all delivered", func() bool { return e.statuses()[StatusDelivered] == 10 })
	got := rc.delivered()
	for _, id := range ids {
		if got[id.String()] != 1 {
			t.Fatalf("message %s delivered %d times", id, got[id.String()])
		}
	}
	for _, h := range rc.all() {
		if !h.SigOK {
			t.Fatalf("bad signature or headers on %s attempt %s", h.ID, h.Attempt)
		}
	}
	// The delivery log shows the retries.
	list, pg, err := e.box.List(context.Background(), m.MerchantID, domain.Test, DeliveryFilter{}, view.Page{Page: 1, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if pg.Count != 10 || len(list) != 10 {
		t.Fatalf("list %d of %d", len(list), pg.Count)
	}
	for _, d := range list {
		if d.Status != StatusDelivered || d.Attempts != 4 || d.LastStatusCode == nil || *d.LastStatusCode != 200 ||
			d.DeliveredAt == nil || d.NextAttemptAt != nil || d.Event != "payment.deposit.success" || len(d.AttemptLog) != 4 {
			t.Fatalf("delivery %+v", d)
		}
		for i, a := range d.AttemptLog {
			want := 500
			if i == 3 {
				want = 200
			}
			if a.Attempt != i+1 || a.StatusCode == nil || *a.StatusCode != want {
				t.Fatalf("attempt log %+v", d.AttemptLog)
			}
		}
	}
	// Filters.
	if l, _, _ := e.box.List(context.Background(), m.MerchantID, domain.Test, DeliveryFilter{Status: StatusFailed}, view.Page{Page: 1, Limit: 10}); len(l) != 0 {
		t.Fatalf("failed filter: %v", l)
	}
	if l, _, _ := e.box.List(context.Background(), m.MerchantID, domain.Test, DeliveryFilter{Event: "payment.deposit.success"}, view.Page{Page: 1, Limit: 3}); len(l) != 3 {
		t.Fatalf("event filter: %v", l)
	}
}

func TestExhaustedScheduleFailsThenManualRetryDelivers(t *testing.T) {
	e := newTestEnv(t)
	var healthy atomic.Bool
	rc := newReceiver(t, nil, func(hit) int {
		if healthy.Load() {
			return 200
		}
		return http.StatusBadGateway
	})
	m := e.merchant(rc.srv.URL)
	other := e.merchant(rc.srv.URL)
	e.runSubscriber(e.pool)
	e.runDispatcher(e.pool)
	id := e.deposits(m.MerchantID, 1)[0].String()
	eventually(t, 10*time.Second, "failed", func() bool { return e.statuses()[StatusFailed] == 1 })
	d, err := e.box.Get(context.Background(), m.MerchantID, domain.Test, id)
	if err != nil {
		t.Fatal(err)
	}
	if d.Attempts != len(fastSchedule)+1 || *d.LastStatusCode != 502 || d.LastError == nil || *d.LastError != "HTTP 502" || d.NextAttemptAt != nil {
		t.Fatalf("failed delivery %+v", d)
	}
	// Another merchant (or environment) cannot see or retry it.
	if _, err := e.redeliver(other.MerchantID, domain.Test, id); err != ErrDeliveryNotFound {
		t.Fatalf("other merchant: %v", err)
	}
	if _, err := e.redeliver(m.MerchantID, domain.Live, id); err != ErrDeliveryNotFound {
		t.Fatalf("other environment: %v", err)
	}
	if _, err := e.redeliver(m.MerchantID, domain.Test, "not-a-uuid"); err != ErrDeliveryNotFound {
		t.Fatalf("bad id: %v", err)
	}
	healthy.Store(true)
	if _, err = e.redeliver(m.MerchantID, domain.Test, id); err != nil {
		t.Fatalf("retry: %v", err)
	}
	eventually(t, 10*time.Second, "delivered after manual retry", func() bool { return e.statuses()[StatusDelivered] == 1 })
	d, _ = e.box.Get(context.Background(), m.MerchantID, domain.Test, id)
	if d.Attempts != len(fastSchedule)+2 || len(d.AttemptLog) != len(fastSchedule)+2 {
		t.Fatalf("after retry %+v", d)
	}
}

func TestNoEndpointThenRetry(t *testing.T) {
	e := newTestEnv(t)
	m := e.merchant("")
	e.runSubscriber(e.pool)
	disp, _ := e.runDispatcher(e.pool)
	prompt := func() bool {
		disp.mu.Lock()
		defer disp.mu.Unlock()
		return disp.adm.prompt[m.MerchantID]
	}
	id := e.deposits(m.MerchantID, 1)[0].String()
	eventually(t, 10*time.Second, "no_endpoint", func() bool { return e.statuses()[StatusNoEndpoint] == 1 })
	d, _ := e.box.Get(context.Background(), m.MerchantID, domain.Test, id)
	if d.Attempts != 0 || len(d.AttemptLog) != 0 || d.LastError == nil {
		t.Fatalf("no endpoint: %+v", d)
	}
	// Nothing was sent, so no receiver was seen answering in time: the
	// merchant keeps the slow lane's SlowPerMerchant, not PerMerchant.
	if prompt() {
		t.Fatal("a merchant without a callback URL was marked as answering in time")
	}
	rc := newReceiver(t, secretOf(m), nil)
	e.setURL(m.MerchantID, domain.Test, rc.srv.URL)
	if _, err := e.redeliver(m.MerchantID, domain.Test, id); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "delivered", func() bool { return rc.delivered()[id] == 1 })
	if h := rc.all()[0]; !h.SigOK || h.Attempt != "1" {
		t.Fatalf("hit %+v", h)
	}
	eventually(t, 10*time.Second, "the receiver seen answering in time", prompt)
}

func TestRetryRefusedWhileInFlight(t *testing.T) {
	e := newTestEnv(t)
	release := make(chan struct{})
	rc := newReceiver(t, nil, func(hit) int { <-release; return 200 })
	defer close(release)
	m := e.merchant(rc.srv.URL)
	e.runSubscriber(e.pool)
	e.runDispatcher(e.pool)
	id := e.deposits(m.MerchantID, 1)[0].String()
	eventually(t, 10*time.Second, "in flight", func() bool { return len(rc.all()) == 1 && e.statuses()[StatusDelivering] == 1 })
	if _, err := e.redeliver(m.MerchantID, domain.Test, id); err != ErrDeliveryInProgress {
		t.Fatalf("retry in flight: %v", err)
	}
}

func TestRotatedSecretSignsLaterMessages(t *testing.T) {
	e := newTestEnv(t)
	var current atomic.Value
	rc := newReceiver(t, func() string { return current.Load().(string) }, nil)
	m := e.merchant(rc.srv.URL)
	original := m.SigningSecrets[domain.Test]
	current.Store(original)
	e.runSubscriber(e.pool)
	e.runDispatcher(e.pool)
	first := e.deposits(m.MerchantID, 1)[0].String()
	eventually(t, 10*time.Second, "first", func() bool { return rc.delivered()[first] == 1 })
	const rotated = "whsec_rotated"
	if _, err := e.svc.UpdateMerchant(context.Background(), m.MerchantID, func(merchant.State) ([]domain.Event, error) {
		return []domain.Event{merchant.SigningSecretRotated{Environment: domain.Test, Secret: rotated}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	current.Store(rotated)
	second := e.deposits(m.MerchantID, 1)[0].String()
	eventually(t, 10*time.Second, "second", func() bool { return rc.delivered()[second] == 1 })
	hits := rc.all()
	if len(hits) != 2 || hits[0].ID != first || hits[1].ID != second || !hits[0].SigOK || !hits[1].SigOK {
		t.Fatalf("hits %+v", hits)
	}
	if Verify(original, hits[1].Body, hits[1].Sig) || hits[0].Sig == hits[1].Sig {
		t.Fatal("the message after rotation still verifies with the old secret")
	}
}

// TestDeliveryRefusesPrivateAddresses: in both environments the dial-time
// check stops a URL that resolves (now) to a loopback address, whatever was
// checked when it was set: a host name (localhost here) that resolves to an
// internal address at connect time, as after DNS rebinding, is refused as an
// IP literal is. Nothing reaches the receiver, so the delivery log shows
// nothing of its answers.
func TestDeliveryRefusesPrivateAddresses(t *testing.T) {
	e := newTestEnv(t)
	rc := newReceiver(t, nil, nil)
	port := rc.srv.URL[strings.LastIndex(rc.srv.URL, ":")+1:]
	m := e.merchant("http://localhost:" + port + "/test")
	e.setURL(m.MerchantID, domain.Live, "https://127.0.0.1:"+port+"/live")
	other := e.merchant("http://[::ffff:127.0.0.1]:" + port + "/mapped")
	e.setURL(other.MerchantID, domain.Live, rc.srv.URL) // http on live
	e.runSubscriber(e.pool)
	e.runDispatcher(e.pool, func(d *Dispatcher) { d.Schedule, d.AllowPrivate = []time.Duration{time.Hour}, false })
	ids := map[string][2]string{
		"test localhost":  {m.MerchantID, e.deposits(m.MerchantID, 1)[0].String()},
		"live loopback":   {m.MerchantID, e.depositsIn(m.MerchantID, domain.Live, 1)[0].String()},
		"test mapped":     {other.MerchantID, e.deposits(other.MerchantID, 1)[0].String()},
		"live plain http": {other.MerchantID, e.depositsIn(other.MerchantID, domain.Live, 1)[0].String()},
	}
	envOf := func(name string) domain.Environment {
		if strings.HasPrefix(name, "live") {
			return domain.Live
		}
		return domain.Test
	}
	eventually(t, 10*time.Second, "attempted", func() bool {
		for name, id := range ids {
			d, _ := e.box.Get(context.Background(), id[0], envOf(name), id[1])
			if d.Attempts != 1 || d.Status != StatusPending {
				return false
			}
		}
		return true
	})
	for name, id := range ids {
		d, _ := e.box.Get(context.Background(), id[0], envOf(name), id[1])
		want := "private or loopback"
		if name == "live plain http" {
			want = "https"
		}
		if d.LastError == nil || !strings.Contains(*d.LastError, want) || d.LastStatusCode != nil {
			t.Errorf("%s: error %v, code %v; want %q", name, d.LastError, d.LastStatusCode, want)
		}
	}
	if len(rc.all()) != 0 {
		t.Fatal("a message reached a loopback receiver")
	}
}

// TestDeliveryFollowsNoRedirect: a 3xx is an answer, never followed, so a
// public receiver cannot bounce a delivery to an internal address.
func TestDeliveryFollowsNoRedirect(t *testing.T) {
	e := newTestEnv(t)
	target := newReceiver(t, nil, nil)
	bouncer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.srv.URL+"/internal", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(bouncer.Close)
	m := e.merchant(bouncer.URL)
	e.runSubscriber(e.pool)
	e.runDispatcher(e.pool, func(d *Dispatcher) { d.Schedule = []time.Duration{time.Hour} })
	id := e.deposits(m.MerchantID, 1)[0].String()
	eventually(t, 10*time.Second, "attempted", func() bool {
		d, _ := e.box.Get(context.Background(), m.MerchantID, domain.Test, id)
		return d.Attempts == 1 && d.Status != StatusDelivering
	})
	d, _ := e.box.Get(context.Background(), m.MerchantID, domain.Test, id)
	if d.Status != StatusPending || d.LastStatusCode == nil || *d.LastStatusCode != http.StatusTemporaryRedirect {
		t.Fatalf("delivery %+v", d)
	}
	if len(target.all()) != 0 {
		t.Fatal("the redirect was followed")
	}
}

// TestOrderedPerEscrow: messages sharing an order key go out one after the
// other, even when the first needs retries.
func TestOrderedPerEscrow(t *testing.T) {
	e := newTestEnv(t)
	var mu sync.Mutex
	var order []string
	rc := newReceiver(t, nil, func(h hit) int {
		mu.Lock()
		defer mu.Unlock()
		if h.Event == "escrow.created" && h.Attempt != "3" {
			return 500
		}
		order = append(order, h.Event)
		return 200
	})
	m := e.merchant(rc.srv.URL)
	e.runDispatcher(e.pool)
	var msgs []Message
	for i, ev := range []string{"escrow.created", "escrow.ongoing", "escrow.completed"} {
		msg, err := newMessage(uuid.New(), m.MerchantID, domain.Test, ev, "esc-1", map[string]int{"i": i}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, msg)
	}
	if err := pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
		_, err := Enqueue(context.Background(), tx, msgs)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "delivered", func() bool { return e.statuses()[StatusDelivered] == 3 })
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(order, ",") != "escrow.created,escrow.ongoing,escrow.completed" {
		t.Fatalf("order %v", order)
	}
}

// TestTwoDispatchersNeverSendAnAttemptTwice runs two dispatchers, each on
// its own pool as two processes would, against a receiver that fails a
// fifth of the requests at random.
func TestTwoDispatchersNeverSendAnAttemptTwice(t *testing.T) {
	e := newTestEnv(t)
	type key struct{ id, attempt string }
	var (
		mu    sync.Mutex
		pairs = map[key]int{}
	)
	rc := newReceiver(t, nil, func(h hit) int {
		mu.Lock()
		pairs[key{h.ID, h.Attempt}]++
		mu.Unlock()
		if rand.IntN(5) == 0 {
			return 503
		}
		return 200
	})
	var ms []app.CreatedMerchant
	for i := 0; i < 4; i++ {
		ms = append(ms, e.merchant(rc.srv.URL))
	}
	e.runSubscriber(e.pool)
	long := []time.Duration{10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond,
		10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}
	sched := func(d *Dispatcher) { d.Schedule = long; d.Workers = 16; d.PerMerchant = 4 }
	// Each dispatcher names itself on its requests, so the receiver can
	// tell that both took part.
	sender := func(name string) func(*Dispatcher) {
		return func(d *Dispatcher) { d.Client = &http.Client{Transport: senderTransport{name}} }
	}
	e.runDispatcher(pgtest.OpenPool(t, e.url), sched, sender("A"))
	e.runDispatcher(pgtest.OpenPool(t, e.url), sched, sender("B"))
	var ids []uuid.UUID
	var wg sync.WaitGroup
	var idMu sync.Mutex
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := e.deposits(m.MerchantID, 75)
			idMu.Lock()
			ids = append(ids, got...)
			idMu.Unlock()
		}()
	}
	wg.Wait()
	eventually(t, 60*time.Second, "all 300 delivered", func() bool { return e.statuses()[StatusDelivered] == 300 })
	mu.Lock()
	defer mu.Unlock()
	for k, n := range pairs {
		if n != 1 {
			t.Fatalf("message %s attempt %s sent %d times", k.id, k.attempt, n)
		}
	}
	got := rc.delivered()
	for _, id := range ids {
		if got[id.String()] != 1 {
			t.Fatalf("message %s delivered %d times", id, got[id.String()])
		}
	}
	// Both dispatchers sent: the test proves nothing about two processes
	// if one of them never leased anything.
	senders := map[string]int{}
	for _, h := range rc.all() {
		senders[h.Sender]++
	}
	if senders["A"] == 0 || senders["B"] == 0 || len(senders) != 2 {
		t.Fatalf("requests by sender %v; want some from each of A and B, and from no one else", senders)
	}
}

// TestWorkersBoundAllAttempts: however many merchants have room under
// their own caps, no more than Workers attempts are in flight at once; the
// rest wait for a worker and then go out.
func TestWorkersBoundAllAttempts(t *testing.T) {
	e := newTestEnv(t)
	hang := make(chan struct{})
	release := sync.OnceFunc(func() { close(hang) })
	defer release()
	var cur, peak atomic.Int32
	rc := newReceiver(t, nil, func(hit) int {
		n := cur.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		<-hang
		cur.Add(-1)
		return 200
	})
	const merchants, each, workers = 6, 2, 3
	var ms []string
	for range merchants {
		ms = append(ms, e.merchant(rc.srv.URL).MerchantID)
	}
	e.runSubscriber(e.pool)
	var ids []uuid.UUID
	for _, m := range ms {
		ids = append(ids, e.deposits(m, each)...)
	}
	var w wakeWatch
	e.runDispatcher(e.pool, func(d *Dispatcher) {
		d.Workers, d.PerMerchant, d.SlowPerMerchant = workers, each, each
		d.Timeout, d.SlowAfter = 30*time.Second, 30*time.Second
		w.watch(d)
	})
	eventually(t, 10*time.Second, "every worker busy", func() bool { return cur.Load() >= workers })
	// Twenty polls in which Run could lease past the bound: a lease it
	// made would be in the table when Run goes back to waiting.
	w.waitTurns(t, 20)
	if n := e.statuses()[StatusDelivering]; n != workers {
		t.Fatalf("%d deliveries leased, with %d workers", n, workers)
	}
	if n := len(rc.all()); n != workers || peak.Load() != workers {
		t.Fatalf("%d requests, %d at once, with %d workers", n, peak.Load(), workers)
	}
	release()
	eventually(t, 10*time.Second, "all delivered", func() bool { return len(rc.delivered()) == len(ids) })
	if p := peak.Load(); p > workers {
		t.Fatalf("%d attempts at once, with %d workers", p, workers)
	}
}

// TestBacklogGoesOutAsAttemptsEnd: a merchant with more messages due than
// its cap gets its next attempts as soon as its attempts end, not at the
// next poll: when the end of an attempt gives it room (it was at its cap,
// or it answered in time and now has PerMerchant), the dispatcher leases
// again. The poll interval here is longer than the test.
func TestBacklogGoesOutAsAttemptsEnd(t *testing.T) {
	e := newTestEnv(t)
	gate := make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	defer open()
	rc := newReceiver(t, nil, func(hit) int { <-gate; return 200 })
	m := e.merchant(rc.srv.URL)
	e.runSubscriber(e.pool)
	const backlog = 20
	ids := e.deposits(m.MerchantID, backlog)
	eventually(t, 10*time.Second, "the backlog in the outbox", func() bool { return e.statuses()[StatusPending] == backlog })
	e.runDispatcher(e.pool, func(d *Dispatcher) {
		d.Workers, d.PerMerchant, d.SlowPerMerchant = 8, 3, 1
		d.Timeout, d.SlowAfter = time.Minute, 30*time.Second
		d.PollInterval = time.Hour
	})
	// Never seen answering: one attempt, which waits at the gate.
	eventually(t, 10*time.Second, "the first attempt", func() bool { return len(rc.all()) == 1 })
	open()
	eventually(t, 10*time.Second, "the whole backlog", func() bool { return len(rc.delivered()) == len(ids) })
}

// TestFullLeaseLeasesAgainAtOnce: a lease that comes back full (it got
// all it asked for: every free worker, or maxLease rows) may have left due
// rows behind, and the dispatcher leases again at once, until a lease
// comes back short. Nothing else wakes it here: its poll interval is an
// hour, the rows are inserted without a notification, and no attempt ends
// (their endpoint lookups wait) until every row is leased. Only the
// wake-up it sends itself once listening may add one lease, so with three
// full leases of rows due, the dispatcher leases them all only by leasing
// again. (With fewer workers than maxLease this rule cannot be told apart:
// a full lease takes every worker, and the next comes when an attempt
// ends.)
func TestFullLeaseLeasesAgainAtOnce(t *testing.T) {
	e := newTestEnv(t)
	rc := newReceiver(t, nil, nil)
	gate := make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	defer open()
	const rows = 3 * maxLease
	seedDue(t, e.pool, interleaved(rows, "m1"))
	e.runDispatcher(e.pool, func(d *Dispatcher) {
		d.Workers, d.PerMerchant, d.SlowPerMerchant = 4*maxLease, 4*maxLease, 4*maxLease
		d.Timeout, d.SlowAfter = time.Minute, time.Minute
		d.PollInterval = time.Hour
		d.Endpoints = gatedEndpoints{gate: gate, url: rc.srv.URL}
	})
	eventually(t, 10*time.Second, "every row leased", func() bool { return e.statuses()[StatusDelivering] == rows })
	if n := len(rc.all()); n != 0 {
		t.Fatalf("%d requests before the endpoints were looked up", n)
	}
	open()
	eventually(t, 30*time.Second, "every row delivered", func() bool { return e.statuses()[StatusDelivered] == rows })
	if n := len(rc.all()); n != rows {
		t.Fatalf("%d requests for %d rows", n, rows)
	}
}

// gatedEndpoints looks every endpoint up as url once gate is closed: until
// then the attempts leased wait in flight, before asking any receiver.
type gatedEndpoints struct {
	gate <-chan struct{}
	url  string
}

func (g gatedEndpoints) Endpoint(ctx context.Context, _ string, _ domain.Environment) (Endpoint, error) {
	select {
	case <-g.gate:
		return Endpoint{URL: g.url}, nil
	case <-ctx.Done():
		return Endpoint{}, ctx.Err()
	}
}

// TestDeadMerchantDoesNotDelayOthers: a merchant whose receiver hangs holds
// at most its per-merchant share of the workers.
func TestDeadMerchantDoesNotDelayOthers(t *testing.T) {
	e := newTestEnv(t)
	hang := make(chan struct{})
	defer close(hang)
	dead := newReceiver(t, nil, func(hit) int { <-hang; return 200 })
	alive := newReceiver(t, nil, nil)
	md := e.merchant(dead.srv.URL)
	ma := e.merchant(alive.srv.URL)
	e.runSubscriber(e.pool)
	// SlowPerMerchant = PerMerchant: the cap a merchant never seen
	// answering gets is the one under test here (see isolation_test.go for
	// the slow lane).
	e.runDispatcher(e.pool, func(d *Dispatcher) {
		d.Workers, d.PerMerchant, d.SlowPerMerchant = 8, 3, 3
		d.Timeout = 30 * time.Second
	})
	e.deposits(md.MerchantID, 40)
	eventually(t, 10*time.Second, "dead receiver saturated", func() bool { return len(dead.all()) == 3 })
	start := time.Now()
	ids := e.deposits(ma.MerchantID, 30)
	eventually(t, 10*time.Second, "the live merchant's messages", func() bool { return len(alive.delivered()) == len(ids) })
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("the live merchant waited %s behind the dead one", took)
	}
	if n := len(dead.all()); n != 3 {
		t.Fatalf("the dead receiver got %d concurrent requests, cap is 3", n)
	}
}

// TestCrashHelperProcess is the webhook role of a server process, run by
// TestKilledMidDeliveryLosesNothing in a child process that it kills.
func TestCrashHelperProcess(t *testing.T) {
	url := os.Getenv("WEBHOOKS_CRASH_HELPER_DB")
	if url == "" {
		t.Skip("child process of TestKilledMidDeliveryLosesNothing")
	}
	pool := pgtest.OpenPool(t, url)
	store := postgres.New(pool)
	ctx := context.Background()
	// Its requests say who sent them: the receiver must never answer one (a
	// request still on its way when the child is killed would otherwise be
	// answered 2xx to nobody, and counted as a delivery).
	client := &http.Client{Transport: senderTransport{"child"}}
	// SlowPerMerchant: a merchant never seen answering may have several
	// attempts in flight, so several hang when the process is killed.
	d := &Dispatcher{Pool: pool, Endpoints: endpointsOf(store), Lease: time.Second, Timeout: time.Minute,
		PollInterval: 20 * time.Millisecond, Client: client, SlowPerMerchant: 8}
	sub := newSubscriber(store, pool) // wired as serve wires it
	sub.Handoff = d
	r, err := newSubscriberRunner(ctx, store, pool, sub)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.Run(ctx) }()
	_ = d.Run(ctx) // until killed
}

// TestKilledMidDeliveryLosesNothing kills (SIGKILL) a process running the
// subscriber and the dispatcher while deliveries hang in its hands and
// events are still being written, then starts them again here: every
// message arrives, none twice under the same attempt number.
func TestKilledMidDeliveryLosesNothing(t *testing.T) {
	e := newTestEnv(t)
	unblock := make(chan struct{})
	var blockedMu sync.Mutex
	blocked := map[string]bool{}
	rc := newReceiver(t, nil, func(h hit) int {
		if h.Sender == "child" {
			blockedMu.Lock()
			blocked[h.ID] = true
			blockedMu.Unlock()
			<-unblock
			return 0 // the sender is dead: no answer reaches anyone
		}
		return 200
	})
	// A failure must still let the receiver's handlers return, or closing
	// the receiver (an earlier cleanup) waits for them forever.
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(unblock) }) }
	t.Cleanup(release)
	m := e.merchant(rc.srv.URL)
	if _, err := Install(context.Background(), e.store, e.pool); err != nil {
		t.Fatal(err)
	}
	child := exec.Command(os.Args[0], "-test.run=^TestCrashHelperProcess$")
	child.Env = append(os.Environ(), "WEBHOOKS_CRASH_HELPER_DB="+e.url)
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	const total = 60
	var ids []uuid.UUID
	written := make(chan struct{})
	go func() {
		defer close(written)
		for i := 0; i < total; i++ {
			ids = append(ids, e.deposits(m.MerchantID, 1)...)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	eventually(t, 20*time.Second, "deliveries hanging in the child", func() bool {
		blockedMu.Lock()
		defer blockedMu.Unlock()
		return len(blocked) >= 3
	})
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	release()
	e.runSubscriber(e.pool)
	e.runDispatcher(e.pool)
	<-written
	eventually(t, 30*time.Second, "every message delivered", func() bool { return e.statuses()[StatusDelivered] == total })
	got := rc.delivered()
	for _, id := range ids {
		if got[id.String()] != 1 {
			t.Fatalf("message %s delivered %d times", id, got[id.String()])
		}
	}
	seen := map[string]bool{}
	for _, h := range rc.all() {
		k := h.ID + "#" + h.Attempt
		if seen[k] {
			t.Fatalf("attempt %s sent twice", k)
		}
		seen[k] = true
	}
	blockedMu.Lock()
	defer blockedMu.Unlock()
	for id := range blocked {
		d, err := e.box.Get(context.Background(), m.MerchantID, domain.Test, id)
		if err != nil || d.Attempts < 2 || d.Status != StatusDelivered {
			t.Fatalf("message %s in flight at the kill: %+v %v", id, d, err)
		}
	}
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_deliveries`).Scan(&n); err != nil || n != total {
		t.Fatalf("outbox holds %d rows, want %d (%v)", n, total, err)
	}
}

// TestStoppedDispatcherHandsBackItsAttempts: a dispatcher stopped (not
// killed) mid-attempt returns the message to the queue at once, so the next
// one does not wait for the lease.
func TestStoppedDispatcherHandsBackItsAttempts(t *testing.T) {
	e := newTestEnv(t)
	var hang atomic.Bool
	hang.Store(true)
	release := make(chan struct{})
	defer close(release)
	rc := newReceiver(t, nil, func(hit) int {
		if hang.Load() {
			<-release
			return 0
		}
		return 200
	})
	m := e.merchant(rc.srv.URL)
	e.runSubscriber(e.pool)
	_, stop := e.runDispatcher(e.pool, func(d *Dispatcher) { d.Lease = time.Hour })
	id := e.deposits(m.MerchantID, 1)[0].String()
	eventually(t, 10*time.Second, "in flight", func() bool { return len(rc.all()) == 1 })
	stop()
	d, err := e.box.Get(context.Background(), m.MerchantID, domain.Test, id)
	if err != nil || d.Status != StatusPending || d.Attempts != 1 {
		t.Fatalf("after stop: %+v %v", d, err)
	}
	hang.Store(false)
	e.runDispatcher(e.pool)
	eventually(t, 10*time.Second, "delivered by the next dispatcher", func() bool { return rc.delivered()[id] == 1 })
	if hits := rc.all(); hits[len(hits)-1].Attempt != "2" {
		t.Fatalf("hits %+v", hits)
	}
}

// TestHandedBackAttemptWakesTheOtherDispatchers: an attempt a stopping
// dispatcher abandons goes back to the queue at once, and the dispatchers
// still running (another instance, in a rolling restart) are woken for it,
// not left to find it at their next poll (a minute here).
func TestHandedBackAttemptWakesTheOtherDispatchers(t *testing.T) {
	e := newTestEnv(t)
	rc := newReceiver(t, nil, nil)
	m := e.merchant(rc.srv.URL)
	gate := make(chan struct{})
	defer close(gate)
	// The first dispatcher leases the message; its attempt waits for the
	// endpoint lookup until the dispatcher stops.
	_, stop := e.runDispatcher(e.pool, func(d *Dispatcher) {
		d.Endpoints = gatedEndpoints{gate: gate, url: rc.srv.URL}
		d.Lease = time.Hour
	})
	e.runSubscriber(e.pool)
	id := e.deposits(m.MerchantID, 1)[0].String()
	eventually(t, 10*time.Second, "leased by the first dispatcher", func() bool { return e.statuses()[StatusDelivering] == 1 })
	// The second is listening and has nothing more to do.
	var w wakeWatch
	e.runDispatcher(e.pool, func(d *Dispatcher) {
		d.PollInterval = time.Minute
		d.Retention = -1
		w.watch(d)
	})
	eventually(t, 10*time.Second, "both dispatchers listening", func() bool {
		return e.count(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'idle' AND query = 'LISTEN '||$1`, notifyChannel) == 2
	})
	w.wake(t)
	stop()
	eventually(t, 2*time.Second, "delivered by the second dispatcher", func() bool { return rc.delivered()[id] == 1 })
	if hits := rc.all(); len(hits) != 1 || hits[0].Attempt != "2" {
		t.Fatalf("hits %+v, want attempt 2 only", hits)
	}
}

// senderTransport marks each request with the process that sent it
// (senderHeader), for receivers of tests with several dispatchers.
type senderTransport struct{ name string }

func (t senderTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set(senderHeader, t.name)
	return http.DefaultTransport.RoundTrip(req)
}

// TestDefaultTimeoutIsTenSeconds: the webhook rules count a delivery as successful only
// with a 2xx within 10 s.
func TestDefaultTimeoutIsTenSeconds(t *testing.T) {
	d := &Dispatcher{}
	d.defaults()
	if d.Timeout != 10*time.Second {
		t.Fatalf("default timeout %s, want 10s", d.Timeout)
	}
	if d.Lease <= d.Timeout {
		t.Fatalf("default lease %s must outlast the timeout %s", d.Lease, d.Timeout)
	}
}

// TestUnansweredAttemptTimesOutAndRetries: a receiver that never answers
// costs each attempt Timeout, no more; the attempt is logged as not
// delivered (no status code, the timeout as the error) and retried after
// the schedule's pauses, then the message fails.
func TestUnansweredAttemptTimesOutAndRetries(t *testing.T) {
	e := newTestEnv(t)
	hang := make(chan struct{})
	defer close(hang) // before the receiver's cleanup, which waits for its handlers
	var m app.CreatedMerchant
	rc := newReceiver(t, func() string { return m.SigningSecrets[domain.Test] }, func(hit) int { <-hang; return 200 })
	m = e.merchant(rc.srv.URL)
	const timeout = 300 * time.Millisecond
	schedule := []time.Duration{50 * time.Millisecond, 150 * time.Millisecond}
	e.runSubscriber(e.pool)
	e.runDispatcher(e.pool, func(d *Dispatcher) { d.Timeout = timeout; d.Schedule = schedule })
	id := e.deposits(m.MerchantID, 1)[0].String()

	eventually(t, 10*time.Second, "the message failed", func() bool { return e.statuses()[StatusFailed] == 1 })
	d, err := e.box.Get(context.Background(), m.MerchantID, domain.Test, id)
	if err != nil {
		t.Fatal(err)
	}
	want := "no response within " + timeout.String()
	if d.Attempts != len(schedule)+1 || len(d.AttemptLog) != len(schedule)+1 || d.LastStatusCode != nil ||
		d.LastError == nil || *d.LastError != want || d.DeliveredAt != nil || d.NextAttemptAt != nil {
		t.Fatalf("delivery %+v", d)
	}
	for i, a := range d.AttemptLog {
		if a.Attempt != i+1 || a.StatusCode != nil || a.Error == nil || *a.Error != want {
			t.Fatalf("attempt %d: %+v", i+1, a)
		}
		// The attempt took the timeout: not less (it waited), not the lease.
		if took := time.Duration(a.DurationMs) * time.Millisecond; took < timeout-5*time.Millisecond || took > timeout+2*time.Second {
			t.Fatalf("attempt %d took %s with a %s timeout", i+1, took, timeout)
		}
		if i == 0 {
			continue
		}
		// Retried after the schedule's pause (Rand 0.5: no jitter), counted
		// from the end of the previous attempt.
		gap := a.At.Sub(d.AttemptLog[i-1].At)
		if least := timeout + schedule[i-1] - 5*time.Millisecond; gap < least || gap > least+3*time.Second {
			t.Fatalf("attempt %d came %s after attempt %d; want about %s", i+1, gap, i, least)
		}
	}
	// Each attempt reached the receiver, correctly signed.
	hits := rc.all()
	if len(hits) != len(schedule)+1 {
		t.Fatalf("receiver got %d requests: %+v", len(hits), hits)
	}
	for i, h := range hits {
		if h.ID != id || h.Attempt != strconv.Itoa(i+1) || !h.SigOK || h.Status != -1 {
			t.Fatalf("request %d: %+v", i+1, h)
		}
	}
}
