package webhooks

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/escrowd/escrowd/domain"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func (e *testEnv) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *testEnv) sweep(s *Sweeper) SweepResult {
	e.t.Helper()
	res, err := s.Sweep(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

func wantSweep(t *testing.T, at string, res SweepResult, delivered, noEndpoint, failed int64) {
	t.Helper()
	if !res.Ran || res.Deleted[StatusDelivered] != delivered || res.Deleted[StatusNoEndpoint] != noEndpoint || res.Deleted[StatusFailed] != failed {
		t.Fatalf("sweep at %s: %+v, want ran and deleted delivered %d, no_endpoint %d, failed %d", at, res, delivered, noEndpoint, failed)
	}
}

// TestRetentionDeletesFinishedDeliveriesByAge drives a sweeper with an
// injected clock over an outbox the dispatcher filled: delivered and
// no_endpoint rows go after the retention, failed ones after three times
// the retention, with their attempts; rows waiting or in flight stay
// however old they are, even a failed one a merchant retried.
func TestRetentionDeletesFinishedDeliveriesByAge(t *testing.T) {
	e := newTestEnv(t)
	ok := newReceiver(t, nil, nil)
	var hang atomic.Bool
	release := make(chan struct{})
	defer close(release)
	bad := newReceiver(t, nil, func(hit) int {
		if hang.Load() {
			<-release
			return 200
		}
		return http.StatusBadGateway
	})
	good, failing, none := e.merchant(ok.srv.URL), e.merchant(bad.srv.URL), e.merchant("")
	e.runSubscriber(e.pool)
	// No retries: a failing receiver fails the message at once. The
	// dispatcher's own sweeper is off; this test sweeps by hand.
	e.runDispatcher(e.pool, func(d *Dispatcher) { d.Schedule = []time.Duration{}; d.Retention = -1 })
	delivered := e.deposits(good.MerchantID, 3)
	failed := e.deposits(failing.MerchantID, 2)
	e.deposits(none.MerchantID, 2)
	eventually(t, 10*time.Second, "3 delivered, 2 failed, 2 without endpoint", func() bool {
		s := e.statuses()
		return s[StatusDelivered] == 3 && s[StatusFailed] == 2 && s[StatusNoEndpoint] == 2
	})
	// A message waiting for a far retry since long ago.
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO webhook_deliveries
		(id, merchant_id, environment, event, body, created_at, next_attempt_at)
		VALUES ($1, 'm-waiting', 'test', 'payment.deposit.success', '\x7b7d', now() - interval '400 days', now() + interval '400 days')`,
		uuid.New()); err != nil {
		t.Fatal(err)
	}
	// The merchant retries a failed message; its receiver now hangs, so the
	// attempt stays in flight through every sweep below.
	hang.Store(true)
	if _, err := e.redeliver(failing.MerchantID, domain.Test, failed[0].String()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the retry in flight", func() bool { return e.statuses()[StatusDelivering] == 1 })
	if n := e.count(`SELECT count(*) FROM ` + loggedAttempts + ` l`); n != 5 {
		t.Fatalf("%d attempts logged, want 5 (3 delivered, 2 failed)", n)
	}

	base := time.Now()
	clock := &fakeClock{t: base}
	retention := 720 * time.Hour
	sw := &Sweeper{Pool: e.pool, Retention: retention, Interval: 5 * time.Minute, Batch: 2, Now: clock.Now}

	clock.Set(base.Add(retention - time.Hour))
	wantSweep(t, "retention - 1h", e.sweep(sw), 0, 0, 0)
	clock.Set(base.Add(retention - time.Hour + time.Minute))
	if res := e.sweep(sw); res.Ran {
		t.Fatalf("a second sweep within the interval ran: %+v", res)
	}

	clock.Set(base.Add(retention + time.Hour))
	wantSweep(t, "retention + 1h", e.sweep(sw), 3, 2, 0) // 3 delivered in batches of 2
	s := e.statuses()
	if len(s) != 3 || s[StatusFailed] != 1 || s[StatusDelivering] != 1 || s[StatusPending] != 1 {
		t.Fatalf("after the retention: %v, want the failed, the in-flight and the waiting message", s)
	}
	// The attempts of deleted deliveries are gone with them.
	if n := e.count(`SELECT count(*) FROM ` + loggedAttempts + ` l`); n != 2 {
		t.Fatalf("%d attempts left, want 2 (one per failed message)", n)
	}
	if _, err := e.redeliver(good.MerchantID, domain.Test, delivered[0].String()); err != ErrDeliveryNotFound {
		t.Fatalf("retry of a swept delivery: %v", err)
	}

	clock.Set(base.Add(FailedRetentionFactor*retention - time.Hour))
	wantSweep(t, "3× retention - 1h", e.sweep(sw), 0, 0, 0)
	clock.Set(base.Add(FailedRetentionFactor*retention + time.Hour))
	wantSweep(t, "3× retention + 1h", e.sweep(sw), 0, 0, 1)
	clock.Set(base.Add(100 * FailedRetentionFactor * retention))
	wantSweep(t, "much later", e.sweep(sw), 0, 0, 0)
	if s := e.statuses(); len(s) != 2 || s[StatusDelivering] != 1 || s[StatusPending] != 1 {
		t.Fatalf("at the end: %v, want only the in-flight and the waiting message", s)
	}
	// The attempt in flight was never disturbed: it completes.
	hang.Store(false)
	release <- struct{}{}
	eventually(t, 10*time.Second, "the retried message delivered", func() bool { return e.statuses()[StatusDelivered] == 1 })
	d, err := e.box.Get(context.Background(), failing.MerchantID, domain.Test, failed[0].String())
	if err != nil || d.Status != StatusDelivered || len(d.AttemptLog) != 2 {
		t.Fatalf("retried message %+v %v", d, err)
	}
}

// TestSweepOnceAcrossInstances: a sweep runs in one instance at a time
// (advisory try-lock) and at most once per interval across instances
// (webhook_retention.swept_at); a last sweep stamped far in the future by
// a wrong clock does not stop sweeping.
func TestSweepOnceAcrossInstances(t *testing.T) {
	e := newTestEnv(t)
	clock := &fakeClock{t: time.Now()}
	newSweeper := func() *Sweeper {
		return &Sweeper{Pool: e.pool, Retention: time.Hour, Interval: 10 * time.Minute, Now: clock.Now}
	}
	// Another instance is sweeping: this one skips.
	conn, err := e.pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(context.Background(), `SELECT pg_advisory_lock(`+sweepLockSQL+`)`); err != nil {
		t.Fatal(err)
	}
	if res := e.sweep(newSweeper()); res.Ran {
		t.Fatal("swept while another instance holds the lock")
	}
	if _, err := conn.Exec(context.Background(), `SELECT pg_advisory_unlock(`+sweepLockSQL+`)`); err != nil {
		t.Fatal(err)
	}
	conn.Release()

	// Many instances at once: exactly one sweeps.
	var ran atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			res, err := newSweeper().Sweep(context.Background())
			if err != nil {
				t.Error(err)
			}
			if res.Ran {
				ran.Add(1)
			}
		})
	}
	wg.Wait()
	if ran.Load() != 1 {
		t.Fatalf("%d of 8 concurrent instances swept, want 1", ran.Load())
	}
	clock.Set(clock.Now().Add(9 * time.Minute))
	if e.sweep(newSweeper()).Ran {
		t.Fatal("another instance swept within the interval")
	}
	clock.Set(clock.Now().Add(time.Minute))
	if !e.sweep(newSweeper()).Ran {
		t.Fatal("no sweep once the interval passed")
	}
	if _, err := e.pool.Exec(context.Background(), `UPDATE webhook_retention SET swept_at = $1`, clock.Now().Add(30*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if !e.sweep(newSweeper()).Ran {
		t.Fatal("a last sweep stamped in the future blocked sweeping")
	}
}

// TestDispatcherSweepsInTheBackground: the dispatcher's own sweeper deletes
// delivered messages once they are older than its retention.
func TestDispatcherSweepsInTheBackground(t *testing.T) {
	e := newTestEnv(t)
	rc := newReceiver(t, nil, nil)
	m := e.merchant(rc.srv.URL)
	e.runSubscriber(e.pool)
	e.runDispatcher(e.pool, func(d *Dispatcher) { d.Retention = 200 * time.Millisecond; d.SweepInterval = 100 * time.Millisecond })
	ids := e.deposits(m.MerchantID, 3)
	eventually(t, 10*time.Second, "all delivered", func() bool { return len(rc.delivered()) == 3 })
	eventually(t, 10*time.Second, "the outbox swept", func() bool {
		return e.count(`SELECT count(*) FROM webhook_deliveries`) == 0 && e.count(`SELECT count(*) FROM webhook_attempts`) == 0
	})
	for _, id := range ids {
		if rc.delivered()[id.String()] != 1 {
			t.Fatalf("message %s delivered %d times", id, rc.delivered()[id.String()])
		}
	}
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestOutboxGauges: pending count, oldest pending age and failed count, as
// refreshed by a dispatcher.
func TestOutboxGauges(t *testing.T) {
	e := newTestEnv(t)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	if again := NewMetrics(reg); again.pending != m.pending || again.failed != m.failed || again.oldest != m.oldest {
		t.Fatal("a second registration did not share the gauges")
	}
	rc := newReceiver(t, nil, func(hit) int { return http.StatusServiceUnavailable })
	mer := e.merchant(rc.srv.URL)
	e.runSubscriber(e.pool)
	ids := e.deposits(mer.MerchantID, 4)
	eventually(t, 10*time.Second, "4 enqueued", func() bool { return e.statuses()[StatusPending] == 4 })
	if _, err := e.pool.Exec(context.Background(), `UPDATE webhook_deliveries SET created_at = now() - interval '1 hour' WHERE id = $1`, ids[2]); err != nil {
		t.Fatal(err)
	}
	if err := m.refresh(context.Background(), e.pool); err != nil {
		t.Fatal(err)
	}
	if v, _ := gauge(t, reg, "escrowd_webhook_outbox_pending"); v != 4 {
		t.Fatalf("pending %v, want 4", v)
	}
	if v, _ := gauge(t, reg, "escrowd_webhook_outbox_oldest_pending_age_seconds"); v < 3600 || v > 3700 {
		t.Fatalf("oldest pending age %v, want about an hour", v)
	}
	if v, found := gauge(t, reg, "escrowd_webhook_outbox_failed"); !found || v != 0 {
		t.Fatalf("failed %v (%v), want 0", v, found)
	}
	// A dispatcher with the gauges keeps them current: every message fails
	// at once (no retries).
	e.runDispatcher(e.pool, func(d *Dispatcher) {
		d.Schedule = []time.Duration{}
		d.Metrics, d.MetricsInterval = m, 20*time.Millisecond
	})
	eventually(t, 10*time.Second, "the gauges to show 4 failed, none pending", func() bool {
		p, _ := gauge(t, reg, "escrowd_webhook_outbox_pending")
		o, _ := gauge(t, reg, "escrowd_webhook_outbox_oldest_pending_age_seconds")
		f, _ := gauge(t, reg, "escrowd_webhook_outbox_failed")
		return p == 0 && o == 0 && f == 4
	})
}

// TestFinishedAtFollowsTheStatus: finished_at is set exactly on terminal
// rows (what the sweep and its index rely on) and cleared by a retry.
func TestFinishedAtFollowsTheStatus(t *testing.T) {
	e := newTestEnv(t)
	m := e.merchant("")
	e.runSubscriber(e.pool)
	_, stop := e.runDispatcher(e.pool, func(d *Dispatcher) { d.Retention = -1 })
	id := e.deposits(m.MerchantID, 1)[0]
	eventually(t, 10*time.Second, "no_endpoint", func() bool { return e.statuses()[StatusNoEndpoint] == 1 })
	finished := func() bool {
		return e.count(`SELECT count(*) FROM webhook_deliveries WHERE id = $1 AND finished_at IS NOT NULL`, id) == 1
	}
	if !finished() {
		t.Fatal("a no_endpoint row has no finished_at")
	}
	stop()
	if _, err := e.redeliver(m.MerchantID, domain.Test, id.String()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "pending and unfinished after a retry", func() bool { return e.statuses()[StatusPending] == 1 && !finished() })
	e.runDispatcher(e.pool, func(d *Dispatcher) { d.Retention = -1 })
	eventually(t, 10*time.Second, "no_endpoint again", func() bool { return e.statuses()[StatusNoEndpoint] == 1 && finished() })
}
