package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/storetest"
)

// TestHandoffDeliversFirstAttemptsWithoutLease wires subscriber and
// dispatcher as `escrowd serve` does. The first message of a merchant
// goes through a lease (the merchant is not yet seen answering); once it
// answered, its messages are handed over as they are enqueued, each
// delivered once, as attempt 1.
func TestHandoffDeliversFirstAttemptsWithoutLease(t *testing.T) {
	e := newTestEnv(t)
	rc := newReceiver(t, nil, nil)
	m := e.merchant(rc.srv.URL)
	reg := prometheus.NewRegistry()
	leased := e.countLeasedAtEnqueue()
	d, _ := e.runDispatcher(e.pool, func(d *Dispatcher) { d.Metrics = NewMetrics(reg) })
	e.runSubscriberHandingTo(e.pool, d)
	first := e.deposits(m.MerchantID, 1)
	eventually(t, 10*time.Second, "first delivered", func() bool { return e.statuses()[StatusDelivered] == 1 })
	if n, h := leased(), startedVia(t, reg, viaHandoff); n != 0 || h != 0 {
		t.Fatalf("%d attempts stored leased, %v started via handoff, for a merchant never seen answering", n, h)
	}
	ids := append(first, e.deposits(m.MerchantID, 20)...)
	eventually(t, 10*time.Second, "all delivered", func() bool { return e.statuses()[StatusDelivered] == 21 })
	if startedVia(t, reg, viaHandoff) == 0 {
		t.Fatal("no attempt handed over")
	}
	got := rc.delivered()
	for _, id := range ids {
		if got[id.String()] != 1 {
			t.Fatalf("message %s delivered %d times", id, got[id.String()])
		}
	}
	for _, h := range rc.all() {
		if h.Attempt != "1" || !h.SigOK {
			t.Fatalf("request %+v: want attempt 1, signed", h)
		}
	}
	// The counter tells them apart: every attempt counted once, by how it
	// came. Every attempt the subscriber stored leased was handed over (the
	// dispatcher ran throughout) and started as such; the others were
	// leased.
	handed, viaLeases := startedVia(t, reg, viaHandoff), startedVia(t, reg, viaLease)
	if n := leased(); handed != float64(n) || handed+viaLeases != 21 || viaLeases < 1 {
		t.Fatalf("started via handoff %v, via lease %v; stored leased %d, 21 in all", handed, viaLeases, n)
	}
}

// countLeasedAtEnqueue makes the database count the deliveries stored
// already leased: the attempts a subscriber hands over (a lease leases rows
// stored pending). It returns how many committed so far. The count is kept
// by a trigger, apart from the dispatcher, so that tests can check what the
// dispatcher reports against it.
func (e *testEnv) countLeasedAtEnqueue() (committed func() int) {
	e.t.Helper()
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `
		CREATE TABLE test_leased_at_enqueue (id uuid PRIMARY KEY);
		CREATE FUNCTION test_leased_at_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    INSERT INTO test_leased_at_enqueue VALUES (NEW.id);
		    RETURN NULL;
		END $$;
		CREATE TRIGGER test_leased_at_enqueue AFTER INSERT ON webhook_deliveries
		    FOR EACH ROW WHEN (NEW.status = 'delivering') EXECUTE FUNCTION test_leased_at_enqueue();`); err != nil {
		e.t.Fatal(err)
	}
	return func() int {
		e.t.Helper()
		var n int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM test_leased_at_enqueue`).Scan(&n); err != nil {
			e.t.Fatal(err)
		}
		return n
	}
}

// handedWaiting is how many attempts were handed over to d and not yet
// started.
func handedWaiting(d *Dispatcher) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.handed)
}

// startedVia reads escrowd_webhook_attempts_started_total{via}.
func startedVia(t *testing.T, reg *prometheus.Registry, via string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "escrowd_webhook_attempts_started_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "via" && l.GetValue() == via {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestEnqueueLeasesAsTheOrderGateAllows: a message asked to be leased is
// stored leased for attempt 1 unless an earlier message of its order key
// is undelivered, in the outbox or earlier in the batch.
func TestEnqueueLeasesAsTheOrderGateAllows(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	msg := func(key string) Message {
		t.Helper()
		m, err := newMessage(uuid.New(), "m1", domain.Test, "escrow.created", key, map[string]string{"k": key}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	enq := func(msgs []Message, take []bool) (leased []leasedAttempt) {
		t.Helper()
		if err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) (err error) {
			_, leased, err = enqueue(ctx, tx, msgs, take, time.Minute)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return leased
	}
	pendingK, deliveredK := msg("k-pending"), msg("k-delivered")
	enq([]Message{pendingK, deliveredK}, nil)
	if _, err := e.pool.Exec(ctx, `UPDATE webhook_deliveries SET status = 'delivered' WHERE id = $1`, deliveredK.ID); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		msg   Message
		take  bool
		lease bool
	}{
		{"no key, taken", msg(""), true, true},
		{"no key, not taken", msg(""), false, false},
		{"behind a pending message of its key", msg("k-pending"), true, false},
		{"after a delivered message of its key", msg("k-delivered"), true, true},
		{"first of a new key", msg("k-new"), true, true},
		{"second of that key in the batch", msg("k-new"), true, false},
		{"first of a key, not taken", msg("k-other"), false, false},
		{"behind it in the batch", msg("k-other"), true, false},
	}
	var msgs []Message
	var take []bool
	for _, c := range cases {
		msgs, take = append(msgs, c.msg), append(take, c.take)
	}
	// An id already stored is skipped, whatever take says.
	msgs, take = append(msgs, pendingK), append(take, true)
	before := time.Now()
	leased := enq(msgs, take)
	byID := map[uuid.UUID]leasedAttempt{}
	for _, c := range leased {
		byID[c.ID] = c
	}
	for _, c := range cases {
		var status string
		var attempts int
		var lease *time.Time
		if err := e.pool.QueryRow(ctx, `SELECT status, attempts, lease_until FROM webhook_deliveries WHERE id = $1`,
			c.msg.ID).Scan(&status, &attempts, &lease); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got, handed := byID[c.msg.ID]
		if c.lease {
			if status != StatusDelivering || attempts != 1 || lease == nil || lease.Before(before.Add(50*time.Second)) {
				t.Errorf("%s: stored %s, attempt %d, lease %v; want leased for a minute", c.name, status, attempts, lease)
			}
			if !handed || got.Attempt != 1 || got.MerchantID != "m1" || string(got.Body) != string(c.msg.Body) {
				t.Errorf("%s: returned %+v (%v)", c.name, got, handed)
			}
		} else {
			if status != StatusPending || attempts != 0 || lease != nil || handed {
				t.Errorf("%s: stored %s, attempt %d, lease %v, returned %v; want pending", c.name, status, attempts, lease, handed)
			}
		}
	}
	if len(leased) != 3 {
		t.Fatalf("leased %d, want 3", len(leased))
	}
	if _, again := byID[pendingK.ID]; again {
		t.Fatal("a stored message was leased again")
	}
}

// TestReserveTakesWhatALeaseCould: room goes only to merchants seen
// answering in time and not slow, within PerMerchant and Workers, and
// only while Run delivers.
func TestReserveTakesWhatALeaseCould(t *testing.T) {
	d := &Dispatcher{Workers: 3, PerMerchant: 2}
	d.defaults()
	msgs := func(ms ...string) []Message {
		out := make([]Message, len(ms))
		for i, m := range ms {
			out[i] = Message{ID: uuid.New(), MerchantID: m}
		}
		return out
	}
	if take, _ := d.reserve(msgs("m1")); take != nil {
		t.Fatalf("reserved %v while Run is not delivering", take)
	}
	if d.adm.handingOff(d.Now()) {
		t.Fatal("a request refused while Run is not delivering counts as handing off")
	}
	d.adm.running = true
	d.adm.prompt["m1"], d.adm.prompt["m2"], d.adm.prompt["m3"] = true, true, true
	d.adm.slow["m3"] = true
	take, lease := d.reserve(msgs("m1", "m1", "m1", "m3", "m4", "m2", "m2"))
	want := []bool{true, true, false, false, false, true, false}
	if !slices.Equal(take, want) || lease != d.Lease {
		t.Fatalf("take %v lease %s, want %v %s", take, lease, want, d.Lease)
	}
	if d.adm.busy["m1"] != 2 || d.adm.busy["m2"] != 1 || len(d.adm.busy) != 2 {
		t.Fatalf("busy %v", d.adm.busy)
	}
	if take, _ := d.reserve(msgs("m2")); take != nil {
		t.Fatalf("reserved %v beyond Workers", take)
	}
	d.unreserve([]string{"m1", "m2"})
	if d.adm.busy["m1"] != 1 || len(d.adm.busy) != 1 {
		t.Fatalf("busy after unreserve %v", d.adm.busy)
	}
}

// TestReserveLeavesALeaseItsShare: a lease under way may still lease
// leaseN attempts, and what its window granted each merchant; reserve
// takes room beside those, and at once (it never waits for the lease).
func TestReserveLeavesALeaseItsShare(t *testing.T) {
	d := &Dispatcher{Workers: 4, PerMerchant: 3}
	d.defaults()
	d.adm.running, d.adm.prompt["m1"], d.adm.prompt["m2"] = true, true, true
	d.adm.leasing, d.adm.leaseN, d.adm.leaseRooms = true, 2, map[string]int{"m1": 3}
	msgs := []Message{{ID: uuid.New(), MerchantID: "m1"}, {ID: uuid.New(), MerchantID: "m2"},
		{ID: uuid.New(), MerchantID: "m2"}, {ID: uuid.New(), MerchantID: "m2"}}
	take, _ := d.reserve(msgs)
	// m1: the lease may still give it all its room; m2: two, then the
	// workers left beside the lease's 2 are taken.
	if want := []bool{false, true, true, false}; !slices.Equal(take, want) || d.adm.busy["m2"] != 2 || len(d.adm.busy) != 1 {
		t.Fatalf("take %v busy %v, want %v and m2 2", take, d.adm.busy, want)
	}
	if !d.adm.handingOff(d.Now()) {
		t.Fatal("reserve did not mark the dispatcher as handing off")
	}
	// Once the window has chosen (one row, m1's), the lease keeps only
	// that: m1 has room again, and so do the workers.
	d.windowPicked(map[string]int{"m1": 1})
	take, _ = d.reserve(msgs[:2])
	if want := []bool{true, false}; !slices.Equal(take, want) || d.adm.busy["m1"] != 1 || d.adm.busy["m2"] != 2 {
		t.Fatalf("after the pick: take %v busy %v, want %v", take, d.adm.busy, want)
	}
}

// appendedEvents appends a deposit for merchantID and returns its
// recorded events and message id.
func (e *testEnv) appendedEvents(t *testing.T, merchantID string) ([]eventstore.RecordedEvent, uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	head, err := e.store.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sa, id := topUpAppend(merchantID, domain.Test)
	res, err := e.store.Append(ctx, sa)
	if err != nil {
		t.Fatal(err)
	}
	storetest.WaitReadable(t, e.store, res.Position)
	// From head on, the deposit's events and perhaps others that were held
	// back when head was read (the merchant's): the deposit's alone.
	all, err := e.store.ReadAll(ctx, head, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var events []eventstore.RecordedEvent
	for _, ev := range all {
		if ev.Stream == sa.Stream {
			events = append(events, ev)
		}
	}
	if len(events) != 2 {
		t.Fatalf("read %d events of %s", len(events), sa.Stream)
	}
	return events, id
}

// TestSubscriberHandsOverOnlyWhatCommitted: a batch rolled back gives its
// room back and hands nothing over; one committed hands over its leased
// attempts.
func TestSubscriberHandsOverOnlyWhatCommitted(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	m := e.merchant("http://127.0.0.1:1/")
	d := &Dispatcher{Pool: e.pool}
	d.defaults()
	d.adm.running, d.adm.prompt[m.MerchantID] = true, true
	sub := newSubscriber(e.store, e.pool)
	sub.Handoff = d
	for _, commit := range []bool{false, true} {
		t.Run(fmt.Sprint("commit=", commit), func(t *testing.T) {
			events, id := e.appendedEvents(t, m.MerchantID)
			tx, err := e.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck // a no-op once ended; frees the connection on failure
			if err := sub.Apply(ctx, tx, events); err != nil {
				t.Fatal(err)
			}
			if d.adm.busy[m.MerchantID] != 1 {
				t.Fatalf("busy %v while the batch is open", d.adm.busy)
			}
			if commit {
				err = tx.Commit(ctx)
			} else {
				err = tx.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			sub.Committed(commit)
			h := d.takeHanded()
			if !commit {
				if len(h) != 0 || len(d.adm.busy) != 0 {
					t.Fatalf("rolled back: handed %d, busy %v", len(h), d.adm.busy)
				}
				return
			}
			if len(h) != 1 || h[0].ID != id || h[0].Attempt != 1 || d.adm.busy[m.MerchantID] != 1 {
				t.Fatalf("committed: handed %+v, busy %v", h, d.adm.busy)
			}
			var status string
			if err := e.pool.QueryRow(ctx, `SELECT status FROM webhook_deliveries WHERE id = $1`, id).Scan(&status); err != nil || status != StatusDelivering {
				t.Fatalf("stored %q (%v)", status, err)
			}
		})
	}
}

// TestHandedOverAttemptOfADeadDispatcherGoesOutAfterItsLease: a dispatcher
// that took a handed-over attempt and died (here: never starts it) holds
// it only for its lease; another dispatcher then sends attempt 2, and
// attempt 1 is never sent.
func TestHandedOverAttemptOfADeadDispatcherGoesOutAfterItsLease(t *testing.T) {
	e := newTestEnv(t)
	rc := newReceiver(t, nil, nil)
	m := e.merchant(rc.srv.URL)
	dead := &Dispatcher{Pool: e.pool, Lease: 300 * time.Millisecond}
	dead.defaults()
	dead.adm.running, dead.adm.prompt[m.MerchantID] = true, true
	e.runSubscriberHandingTo(e.pool, dead)
	id := e.deposits(m.MerchantID, 1)[0]
	// It never runs: what is handed over to it stays there.
	eventually(t, 10*time.Second, "handed over", func() bool { return handedWaiting(dead) == 1 })
	if s := e.statuses(); s[StatusDelivering] != 1 {
		t.Fatalf("statuses %v", s)
	}
	e.runDispatcher(e.pool)
	eventually(t, 10*time.Second, "delivered", func() bool { return e.statuses()[StatusDelivered] == 1 })
	hits := rc.all()
	if len(hits) != 1 || hits[0].ID != id.String() || hits[0].Attempt != "2" {
		t.Fatalf("receiver got %+v, want attempt 2 only", hits)
	}
}

// TestHandOverToAStoppedDispatcherQueuesTheAttempts: attempts handed over
// after Run stopped go back to the queue at once, not after their lease.
func TestHandOverToAStoppedDispatcherQueuesTheAttempts(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	d := &Dispatcher{Pool: e.pool}
	d.defaults()
	msg, err := newMessage(uuid.New(), "m1", domain.Test, "payment.deposit.success", "", map[string]int{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var leased []leasedAttempt
	if err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) (err error) {
		_, leased, err = enqueue(ctx, tx, []Message{msg}, []bool{true}, time.Hour)
		return err
	}); err != nil || len(leased) != 1 {
		t.Fatalf("leased %v: %v", leased, err)
	}
	d.adm.busy[msg.MerchantID] = 1 // reserved for it
	d.handOver(leased)
	if len(d.adm.busy) != 0 {
		t.Fatalf("busy %v after handing over to a stopped dispatcher, want its room back", d.adm.busy)
	}
	var status string
	var attempts int
	var due time.Time
	if err := e.pool.QueryRow(ctx, `SELECT status, attempts, next_attempt_at FROM webhook_deliveries WHERE id = $1`,
		msg.ID).Scan(&status, &attempts, &due); err != nil {
		t.Fatal(err)
	}
	if status != StatusPending || attempts != 1 || time.Until(due) > time.Minute {
		t.Fatalf("stored %s, attempt %d, due %s; want pending now, attempt 1 counted", status, attempts, due)
	}
}

// TestLeaseRoomsAreRecordedForReserve: what a lease's window grants each
// merchant is kept for reserve while the lease runs.
func TestLeaseRoomsAreRecordedForReserve(t *testing.T) {
	d := &Dispatcher{}
	d.defaults()
	d.adm.prompt["m1"], d.adm.slow["s1"] = true, true
	d.adm.busy["m1"] = 1
	d.adm.leaseRooms = map[string]int{}
	a := d.adm.allot()
	got := a.rooms(map[string]int{"m1": 5, "s1": 3})
	want := map[string]int{"m1": d.PerMerchant - 1, "s1": d.SlowPerMerchant}
	if !maps.Equal(got, want) || !maps.Equal(d.adm.leaseRooms, want) {
		t.Fatalf("rooms %v, recorded %v, want %v", got, d.adm.leaseRooms, want)
	}
}

// TestHandoffKeepsTheBounds: with the subscriber handing attempts over
// while leases run (a slow receiver keeps attempts in flight, messages keep
// coming), no merchant ever has more than PerMerchant attempts at once,
// nor all of them more than Workers; every message arrives once.
func TestHandoffKeepsTheBounds(t *testing.T) {
	e := newTestEnv(t)
	var mu sync.Mutex
	cur, peak := map[string]int{}, map[string]int{}
	total, peakTotal := 0, 0
	rc := newReceiver(t, nil, func(h hit) int {
		merchant := h.Sender // set below from the URL path
		mu.Lock()
		cur[merchant]++
		total++
		peak[merchant] = max(peak[merchant], cur[merchant])
		peakTotal = max(peakTotal, total)
		mu.Unlock()
		time.Sleep(15 * time.Millisecond)
		mu.Lock()
		cur[merchant]--
		total--
		mu.Unlock()
		return 200
	})
	const workers, perMerchant = 5, 2
	var ms []string
	for range 3 {
		ms = append(ms, e.merchant(rc.srv.URL).MerchantID)
	}
	client := &http.Client{Transport: merchantTransport{}}
	reg := prometheus.NewRegistry()
	d, _ := e.runDispatcher(e.pool, func(d *Dispatcher) {
		d.Workers, d.PerMerchant, d.SlowPerMerchant, d.Client = workers, perMerchant, perMerchant, client
		d.Metrics = NewMetrics(reg)
	})
	e.runSubscriberHandingTo(e.pool, d)
	// Each merchant answers once first (through a lease): only merchants
	// seen answering in time are handed attempts, and without this the
	// rounds below could all be enqueued before any answer, leaving the
	// handoff untested (the check below then failed, now and then).
	var ids []uuid.UUID
	for _, m := range ms {
		ids = append(ids, e.deposits(m, 1)...)
	}
	eventually(t, 10*time.Second, "each merchant seen answering", func() bool { return len(rc.delivered()) == len(ids) })
	for round := 0; round < 15; round++ {
		for _, m := range ms {
			ids = append(ids, e.deposits(m, 2)...)
		}
		time.Sleep(5 * time.Millisecond)
	}
	eventually(t, 30*time.Second, "all delivered", func() bool { return len(rc.delivered()) == len(ids) })
	for _, id := range ids {
		if n := rc.delivered()[id.String()]; n != 1 {
			t.Fatalf("message %s delivered %d times", id, n)
		}
	}
	if startedVia(t, reg, viaHandoff) == 0 {
		t.Fatal("nothing handed over: the test did not test the handoff")
	}
	mu.Lock()
	defer mu.Unlock()
	if peakTotal > workers {
		t.Fatalf("%d attempts at once, with %d workers", peakTotal, workers)
	}
	for m, p := range peak {
		if p > perMerchant {
			t.Fatalf("merchant %s had %d attempts at once, cap %d", m, p, perMerchant)
		}
	}
}

// merchantTransport names each request's merchant in senderHeader: the
// signed body's data carries it (merchantId).
type merchantTransport struct{}

func (merchantTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	var env struct {
		Data struct {
			MerchantID string `json:"merchantId"`
		} `json:"data"`
	}
	_ = json.Unmarshal(body, &env)
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.Header.Set(senderHeader, env.Data.MerchantID)
	return http.DefaultTransport.RoundTrip(r)
}

// TestHandedOverAttemptsNotStartedAtShutdownGoBack: attempts handed over
// while Run was still running but not yet started when it stops (here:
// handed over once its loop has ended) go back to the queue at once, as
// abandoned attempts do, not after their lease.
func TestHandedOverAttemptsNotStartedAtShutdownGoBack(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	var w wakeWatch
	d, stop := e.runDispatcher(e.pool, func(d *Dispatcher) { d.PollInterval = time.Hour; w.watch(d) })
	msg, err := newMessage(uuid.New(), "m1", domain.Test, "payment.deposit.success", "", map[string]int{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var leased []leasedAttempt
	if err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) (err error) {
		_, leased, err = enqueue(ctx, tx, []Message{msg}, []bool{true}, time.Hour)
		return err
	}); err != nil || len(leased) != 1 {
		t.Fatalf("leased %v: %v", leased, err)
	}
	eventually(t, 10*time.Second, "Run delivering", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.adm.running
	})
	w.wake(t) // Run has acted on everything and waits for work (PollInterval: an hour)
	listening := func() int {
		var n int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'idle' AND query = 'LISTEN '||$1`, notifyChannel).Scan(&n); err != nil {
			return -1
		}
		return n
	}
	eventually(t, 10*time.Second, "the dispatcher listening", func() bool { return listening() == 1 })
	// Hold the dispatcher while it stops: its loop ends (on the context),
	// and its handing back waits for the lock, behind the attempts handed
	// over once the context is cancelled (its LISTEN ends with it).
	d.mu.Lock()
	go func() {
		for deadline := time.Now().Add(10 * time.Second); listening() != 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		d.handed = append(d.handed, leased...)
		d.adm.busy[msg.MerchantID]++
		d.mu.Unlock()
	}()
	stop()
	var status string
	var due time.Time
	if err := e.pool.QueryRow(ctx, `SELECT status, next_attempt_at FROM webhook_deliveries WHERE id = $1`,
		msg.ID).Scan(&status, &due); err != nil {
		t.Fatal(err)
	}
	if status != StatusPending || time.Until(due) > time.Minute {
		t.Fatalf("stored %s, due %s; want pending now", status, due)
	}
}

// TestLeasingEnqueueCommitsSynchronously: a batch that stores an attempt
// leased commits with synchronous_commit on, whatever the runner set
// before (off, for every projection batch): the attempt's number must be
// durable before the attempt is made. A batch leasing nothing, including
// one whose lease the order gate refused, keeps the runner's setting.
func TestLeasingEnqueueCommitsSynchronously(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	newMsg := func(key string) Message {
		t.Helper()
		m, err := newMessage(uuid.New(), "m1", domain.Test, "escrow.created", key, map[string]int{}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	settingAfter := func(msgs []Message, take []bool) (string, []leasedAttempt) {
		t.Helper()
		var setting string
		var leased []leasedAttempt
		if err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) (err error) {
			if _, err := tx.Exec(ctx, `SELECT set_config('synchronous_commit', 'off', true)`); err != nil {
				return err
			}
			if _, leased, err = enqueue(ctx, tx, msgs, take, time.Hour); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `SELECT current_setting('synchronous_commit')`).Scan(&setting)
		}); err != nil {
			t.Fatal(err)
		}
		return setting, leased
	}
	if got, leased := settingAfter([]Message{newMsg("")}, nil); got != "off" || len(leased) != 0 {
		t.Fatalf("nothing asked to lease: synchronous_commit %q, leased %d; want off, 0", got, len(leased))
	}
	if got, leased := settingAfter([]Message{newMsg("escrow-1")}, []bool{true}); got != "on" || len(leased) != 1 {
		t.Fatalf("one leased: synchronous_commit %q, leased %d; want on, 1", got, len(leased))
	}
	// escrow-1's first message is still delivering: the gate holds the next.
	if got, leased := settingAfter([]Message{newMsg("escrow-1")}, []bool{true}); got != "off" || len(leased) != 0 {
		t.Fatalf("lease refused by the order gate: synchronous_commit %q, leased %d; want off, 0", got, len(leased))
	}
}

// TestEnqueueWakesTheDispatchers: a pending message wakes idle dispatchers
// through the notification its enqueue sends on commit, not at their next
// poll (an hour here).
func TestEnqueueWakesTheDispatchers(t *testing.T) {
	e := newTestEnv(t)
	rc := newReceiver(t, nil, func(hit) int { return 200 })
	m := e.merchant(rc.srv.URL)
	var w wakeWatch
	e.runDispatcher(e.pool, func(d *Dispatcher) { d.PollInterval = time.Hour; w.watch(d) })
	// The dispatcher is listening, and idle once it has acted on the
	// catch-up wake-up its LISTEN sends: from here only a notification
	// wakes it within the hour.
	eventually(t, 10*time.Second, "the dispatcher listening", func() bool {
		var n int
		err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'idle' AND query = 'LISTEN '||$1`, notifyChannel).Scan(&n)
		return err == nil && n == 1
	})
	w.wake(t)
	msg, err := newMessage(uuid.New(), m.MerchantID, domain.Test, "payment.deposit.success", "", map[string]int{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
		_, err := Enqueue(context.Background(), tx, []Message{msg})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "delivered", func() bool { return e.statuses()[StatusDelivered] == 1 })
}

// TestHandingOffEndsWhenTheSubscriberStopsAsking: leases leave room for
// the handoff only while a subscriber asks for it. While it does (within
// handOffQuiet of its last reserve) Run leases half its free workers, so
// that the subscriber's next batch still finds room; one whose runner lost
// the lock to another process asks no more, and Run's leases then take
// every free worker again instead of half. Before any subscriber asked,
// they take every free worker too.
//
// It watches the leases Run makes, by the rows each leases (a lease is one
// transaction: its rows share their xmin). The attempts leased stay in
// flight (their endpoint lookups wait), so each phase leases with the
// workers the previous ones left free: 32, then 15, 6 and 2. Each phase
// seeds more rows than half of them, all at once and without a
// notification, so that the leases' sizes tell halving from not. The
// dispatcher's clock is the test's: the subscriber stops asking when the
// test moves it on, not after ten seconds. A phase begins only once no
// lease started before the change is still running, which could otherwise
// take its rows by the old rule.
func TestHandingOffEndsWhenTheSubscriberStopsAsking(t *testing.T) {
	e := newTestEnv(t)
	rc := newReceiver(t, nil, nil)
	gate := make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	defer open()
	base := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	var elapsed atomic.Int64 // on the dispatcher's clock, since base
	const workers = 32
	first := seedDue(t, e.pool, interleaved(17, "m1"))
	d, _ := e.runDispatcher(e.pool, func(d *Dispatcher) {
		d.Workers, d.PerMerchant, d.SlowPerMerchant = workers, workers, workers
		d.Timeout, d.SlowAfter, d.Lease = time.Minute, time.Hour, time.Hour
		d.PollInterval = time.Hour
		d.Retention = -1
		d.Endpoints = gatedEndpoints{gate: gate, url: rc.srv.URL}
		d.Now = func() time.Time { return base.Add(time.Duration(elapsed.Load())) }
	})
	leased := 0
	// leases waits until ids are all leased and returns the sizes of the
	// leases that leased them, in order.
	leases := func(ids []uuid.UUID) []int {
		t.Helper()
		leased += len(ids)
		eventually(t, 10*time.Second, fmt.Sprint(leased, " rows leased"), func() bool { return e.statuses()[StatusDelivering] == leased })
		rows, err := e.pool.Query(context.Background(), `
			SELECT count(*) FROM webhook_deliveries WHERE id = ANY ($1::uuid[])
			 GROUP BY xmin::text::bigint ORDER BY min(lease_until), xmin::text::bigint`, pgUUIDs(ids))
		if err != nil {
			t.Fatal(err)
		}
		sizes, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			t.Fatal(err)
		}
		return sizes
	}
	// phase makes change, waits until no lease begun before it runs, and
	// seeds n due rows for the leases begun after it.
	phase := func(change func(), n int) []uuid.UUID {
		t.Helper()
		change()
		eventually(t, 10*time.Second, "no lease under way", func() bool {
			d.mu.Lock()
			defer d.mu.Unlock()
			return !d.adm.leasing
		})
		ids := seedDue(t, e.pool, interleaved(n, "m1"))
		d.signal()
		return ids
	}
	if got := leases(first); !slices.Equal(got, []int{17}) {
		t.Fatalf("before any subscriber asked: leases of %v for 17 rows and 32 free workers, want [17]", got)
	}
	ids := phase(func() { d.reserve(nil) }, 9)
	if got := leases(ids); !slices.Equal(got, []int{8, 1}) {
		t.Fatalf("while the subscriber asks: leases of %v for 9 rows and 15 free workers, want [8 1] (half, then the rest)", got)
	}
	ids = phase(func() { elapsed.Store(int64(handOffQuiet - time.Second)) }, 4)
	if got := leases(ids); !slices.Equal(got, []int{3, 1}) {
		t.Fatalf("%s after the subscriber last asked: leases of %v for 4 rows and 6 free workers, want [3 1]", handOffQuiet-time.Second, got)
	}
	ids = phase(func() { elapsed.Store(int64(handOffQuiet)) }, 2)
	if got := leases(ids); !slices.Equal(got, []int{2}) {
		t.Fatalf("%s after the subscriber last asked: leases of %v for 2 rows and 2 free workers, want [2]", handOffQuiet, got)
	}
	if n := len(rc.all()); n != 0 {
		t.Fatalf("%d requests before the endpoints were looked up", n)
	}
}

// TestRepeatedEnqueueChangesNothing: enqueueing messages stored before (a
// batch applied again) inserts nothing, so it neither wakes the
// dispatchers nor commits synchronously, whatever the stored rows' status:
// what the enqueue inserted decides, not what the table holds.
func TestRepeatedEnqueueChangesNothing(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `LISTEN `+notifyChannel); err != nil {
		t.Fatal(err)
	}
	notified := func() bool {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := conn.Conn().WaitForNotification(wctx)
		return err == nil
	}
	msg := func(key string) Message {
		t.Helper()
		m, err := newMessage(uuid.New(), "m1", domain.Test, "escrow.created", key, map[string]int{}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	run := func(msgs []Message, take []bool) (setting string, inserted int64, leased int) {
		t.Helper()
		if err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT set_config('synchronous_commit', 'off', true)`); err != nil {
				return err
			}
			n, l, err := enqueue(ctx, tx, msgs, take, time.Hour)
			if err != nil {
				return err
			}
			inserted, leased = n, len(l)
			return tx.QueryRow(ctx, `SELECT current_setting('synchronous_commit')`).Scan(&setting)
		}); err != nil {
			t.Fatal(err)
		}
		return setting, inserted, leased
	}
	pending, leasedMsg, gated := msg(""), msg("escrow-1"), msg("escrow-1")
	if s, n, l := run([]Message{pending, leasedMsg, gated}, []bool{false, true, true}); s != "on" || n != 3 || l != 1 || !notified() {
		t.Fatalf("first enqueue: synchronous_commit %q, %d inserted, %d leased; want on, 3, 1 and a notification", s, n, l)
	}
	// Again, asked to lease all (one stored delivering, two pending).
	if s, n, l := run([]Message{pending, leasedMsg, gated}, []bool{true, true, true}); s != "off" || n != 0 || l != 0 || notified() {
		t.Fatalf("repeated enqueue: synchronous_commit %q, %d inserted, %d leased, or a notification; want off, 0, 0, none", s, n, l)
	}
	// Again, asking for nothing.
	if s, n, l := run([]Message{pending, leasedMsg, gated}, nil); s != "off" || n != 0 || l != 0 || notified() {
		t.Fatalf("repeated enqueue: synchronous_commit %q, %d inserted, %d leased, or a notification; want off, 0, 0, none", s, n, l)
	}
	// A batch only of leased messages wakes nobody; one the gate refused does.
	if _, _, l := run([]Message{msg("escrow-2")}, []bool{true}); l != 1 || notified() {
		t.Fatalf("a leased message: %d leased, or a notification; want 1, none", l)
	}
	if _, _, l := run([]Message{msg("escrow-2")}, []bool{true}); l != 0 || !notified() {
		t.Fatalf("a message the gate refused: %d leased, or no notification; want 0 and one", l)
	}
}

// TestUnreportedBatchGivesBackItsRoom: a batch applied without a
// Committed call (Apply outside the runner's pipeline: rebuilds,
// catch-ups) is handed off as not committed when the next batch is planned,
// so its reservation is given back rather than held by the dispatcher for
// good.
func TestUnreportedBatchGivesBackItsRoom(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	m := e.merchant("http://127.0.0.1:1/")
	d := &Dispatcher{Pool: e.pool}
	d.defaults()
	d.adm.running, d.adm.prompt[m.MerchantID] = true, true
	sub := newSubscriber(e.store, e.pool)
	sub.Handoff = d
	apply := func() {
		t.Helper()
		events, _ := e.appendedEvents(t, m.MerchantID)
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // the batch is rolled back
		if err := sub.Apply(ctx, tx, events); err != nil {
			t.Fatal(err)
		}
		if d.adm.busy[m.MerchantID] != 1 {
			t.Fatalf("busy %v while the batch is open, want 1 for its message", d.adm.busy)
		}
	}
	apply() // never reported
	apply()
	sub.Committed(false)
	if h := d.takeHanded(); len(h) != 0 || len(d.adm.busy) != 0 {
		t.Fatalf("handed %d, busy %v; want nothing held", len(h), d.adm.busy)
	}
}

// wakeWatch tells when Run has handled a wake-up in full: watch installs it
// on a dispatcher before Run starts (as its Idle); wake wakes the
// dispatcher and waits until Run, woken after that, has done all it does
// for it and waits again. It counts Run's turns back to waiting too.
type wakeWatch struct {
	mu      sync.Mutex
	d       *Dispatcher
	sent    int // wake-ups sent by wake
	handled int // of them, those Run has handled in full
	turns   int // times Run went back to waiting
}

func (w *wakeWatch) watch(d *Dispatcher) {
	w.d = d
	d.Idle = func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.turns++
		// Only Run's wait takes wake-ups: with none pending as Run goes
		// back to waiting, the round that ends here (or one before it)
		// took every wake-up sent so far, so it began after them. A round
		// that began before the last was sent ends with one pending.
		if len(d.wake) == 0 {
			w.handled = w.sent
		}
	}
}

// waitTurns waits until Run has gone back to waiting n more times (a poll
// each, when nothing else wakes it).
func (w *wakeWatch) waitTurns(t *testing.T, n int) {
	t.Helper()
	w.mu.Lock()
	want := w.turns + n
	w.mu.Unlock()
	eventually(t, 10*time.Second, fmt.Sprintf("%d turns of Run", n), func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.turns >= want
	})
}

func (w *wakeWatch) wake(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	w.d.signal()
	w.sent++
	n := w.sent
	w.mu.Unlock()
	eventually(t, 10*time.Second, "the wake-up handled", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.handled >= n
	})
}

// TestWakeWithNoWorkerFreeIsNotLost: a message the subscriber had no
// worker left for is queued, and its notification wakes the dispatcher
// while the attempts handed over with it hold every worker. That wake-up
// cannot lease; the message must go out as soon as a worker frees up, not
// at the next poll (a minute here), although the attempts that end are of
// a merchant below its cap and known to answer in time, whose ends wake
// nobody by themselves.
func TestWakeWithNoWorkerFreeIsNotLost(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	rc := newReceiver(t, nil, nil)
	gate := make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	defer open()
	var w wakeWatch
	d, _ := e.runDispatcher(e.pool, func(d *Dispatcher) {
		d.Workers, d.PerMerchant, d.SlowPerMerchant = 2, 4, 4
		d.Timeout, d.SlowAfter, d.Lease = time.Minute, time.Minute, time.Hour
		d.PollInterval = time.Minute
		d.Retention = -1
		d.Endpoints = gatedEndpoints{gate: gate, url: rc.srv.URL}
		w.watch(d)
	})
	eventually(t, 10*time.Second, "Run delivering", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.adm.running
	})
	d.mu.Lock()
	d.adm.prompt["m1"] = true
	d.mu.Unlock()
	// What the subscriber does with a batch of three messages and two
	// workers: it reserves two, stores them leased and hands them over;
	// their endpoint lookups wait at the gate.
	msgs := make([]Message, 3)
	for i := range msgs {
		m, err := newMessage(uuid.New(), "m1", domain.Test, "payment.deposit.success", "", map[string]int{"i": i}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		msgs[i] = m
	}
	// A lease under way (Run's first ones find the outbox empty) may
	// still lease every worker, and reserve takes nothing beside it: then
	// give back what it took and try again once Run waits.
	var (
		take  []bool
		lease time.Duration
	)
	eventually(t, 10*time.Second, "two workers reserved", func() bool {
		w.wake(t)
		if take, lease = d.reserve(msgs); slices.Equal(take, []bool{true, true, false}) {
			return true
		}
		for i, ok := range take {
			if ok {
				d.unreserve([]string{msgs[i].MerchantID})
			}
		}
		return false
	})
	var leased []leasedAttempt
	if err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) (err error) {
		_, leased, err = enqueue(ctx, tx, msgs[:2], take[:2], lease)
		return err
	}); err != nil || len(leased) != 2 {
		t.Fatalf("leased %v: %v", leased, err)
	}
	d.handOver(leased)
	// The third is queued: stored pending (without its notification, which
	// would reach Run at a moment of its own), and the wake-up standing in
	// for the notification handled while both workers are taken.
	seedDue(t, e.pool, []string{"m1"})
	w.wake(t)
	if s := e.statuses(); s[StatusPending] != 1 || s[StatusDelivering] != 2 {
		t.Fatalf("statuses %v before the workers free up, want 1 pending and 2 delivering", s)
	}
	open()
	eventually(t, 2*time.Second, "the queued message delivered", func() bool { return e.statuses()[StatusDelivered] == 3 })
}
