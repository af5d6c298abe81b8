package webhooks

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/webhook"
	"github.com/escrowd/escrowd/internal/app"
)

// TestRedeliveryIsQueuedFromItsRecord: a redelivery is queued by the
// subscriber from the request recorded in the log, never beside it. While
// the subscriber is stopped a request changes no outbox row; the requests
// that concurrently pass the outbox's check are bounded by the delivery's
// stream, so past the bound they are refused and record nothing; once the
// subscriber runs, each recorded request is counted exactly once and the
// delivery is delivered again.
func TestRedeliveryIsQueuedFromItsRecord(t *testing.T) {
	e := newTestEnv(t)
	m := e.merchant("")
	stopSub := e.runSubscriber(e.pool)
	e.runDispatcher(e.pool)
	id := e.deposits(m.MerchantID, 1)[0]
	eventually(t, 10*time.Second, "no_endpoint", func() bool { return e.statuses()[StatusNoEndpoint] == 1 })
	stopSub()

	const asks = webhook.MaxRedeliveries + 3
	errs := make(chan error, asks)
	var wg sync.WaitGroup
	for range asks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.redeliver(m.MerchantID, domain.Test, id.String())
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	ok, refused := 0, 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, webhook.ErrRedeliveriesExhausted):
			refused++
		default:
			t.Fatalf("a request failed: %v", err)
		}
	}
	if ok != webhook.MaxRedeliveries || refused != asks-webhook.MaxRedeliveries {
		t.Fatalf("%d requests recorded and %d refused, want %d and %d", ok, refused, webhook.MaxRedeliveries, asks-webhook.MaxRedeliveries)
	}
	recorded, err := e.store.ReadStream(context.Background(), app.WebhookDeliveryKind.StreamName(id.String()), 0, 100)
	if err != nil || len(recorded) != webhook.MaxRedeliveries {
		t.Fatalf("the delivery's stream holds %d requests (%v), want %d", len(recorded), err, webhook.MaxRedeliveries)
	}
	manual := func() int { return e.count(`SELECT manual_retries FROM webhook_deliveries WHERE id = $1`, id) }
	if n, s := manual(), e.statuses(); n != 0 || s[StatusNoEndpoint] != 1 {
		t.Fatalf("with the subscriber stopped the outbox row changed: %d manual retries, statuses %v", n, s)
	}

	rc := newReceiver(t, secretOf(m), nil)
	e.setURL(m.MerchantID, domain.Test, rc.srv.URL)
	e.runSubscriber(e.pool)
	eventually(t, 10*time.Second, "the recorded requests counted and the delivery delivered", func() bool {
		return manual() == webhook.MaxRedeliveries && rc.delivered()[id.String()] >= 1 && e.statuses()[StatusDelivered] == 1
	})
	if _, err := e.redeliver(m.MerchantID, domain.Test, id.String()); !errors.Is(err, webhook.ErrRedeliveriesExhausted) {
		t.Fatalf("a request past the bound: %v", err)
	}
	if n := manual(); n != webhook.MaxRedeliveries {
		t.Fatalf("%d manual retries counted, want %d", n, webhook.MaxRedeliveries)
	}
}

// TestRequestedRedeliveryOutlivesTheRetention: between the request's
// check and the subscriber's reading of it, the retention does not delete
// a finished delivery past its age: the check restarts its clock, so the
// request recorded is the redelivery made.
func TestRequestedRedeliveryOutlivesTheRetention(t *testing.T) {
	e, m, id := oldFinishedDelivery(t)
	if _, err := e.redeliver(m.MerchantID, domain.Test, id.String()); err != nil {
		t.Fatal(err)
	}
	sw := &Sweeper{Pool: e.pool, Retention: 720 * time.Hour, Interval: time.Minute, Batch: 10}
	if res := e.sweep(sw); !res.Ran {
		t.Fatalf("the sweep did not run: %+v", res)
	}
	if n := e.count(`SELECT count(*) FROM webhook_deliveries WHERE id = $1`, id); n != 1 {
		t.Fatal("the retention deleted a delivery whose redelivery was recorded")
	}
	rc := newReceiver(t, secretOf(m), nil)
	e.setURL(m.MerchantID, domain.Test, rc.srv.URL)
	e.runSubscriber(e.pool)
	e.runDispatcher(e.pool, func(d *Dispatcher) { d.Retention = -1 })
	eventually(t, 10*time.Second, "the recorded redelivery delivered", func() bool { return rc.delivered()[id.String()] == 1 })
}

// TestRefusedRedeliveryKeepsTheRetention: a request for a delivery already
// redelivered as often as it may be is refused, and does not restart its
// retention clock, so asking again and again keeps nothing longer.
func TestRefusedRedeliveryKeepsTheRetention(t *testing.T) {
	e, m, id := oldFinishedDelivery(t)
	if _, err := e.pool.Exec(context.Background(), `UPDATE webhook_deliveries SET manual_retries = $2 WHERE id = $1`, id, webhook.MaxRedeliveries); err != nil {
		t.Fatal(err)
	}
	if _, err := e.redeliver(m.MerchantID, domain.Test, id.String()); !errors.Is(err, webhook.ErrRedeliveriesExhausted) {
		t.Fatalf("redelivery past the bound: %v", err)
	}
	if n := e.count(`SELECT count(*) FROM webhook_deliveries WHERE id = $1 AND finished_at < now() - interval '99 days'`, id); n != 1 {
		t.Fatal("a refused redelivery restarted the retention clock")
	}
	sw := &Sweeper{Pool: e.pool, Retention: 720 * time.Hour, Interval: time.Minute, Batch: 10}
	if res := e.sweep(sw); !res.Ran {
		t.Fatalf("the sweep did not run: %+v", res)
	}
	if n := e.count(`SELECT count(*) FROM webhook_deliveries WHERE id = $1`, id); n != 0 {
		t.Fatal("the retention kept a delivery past its time")
	}
}

// oldFinishedDelivery is a merchant's deposit delivery that finished (no
// endpoint) 100 days ago, past a 30-day retention, with the subscriber and
// dispatcher stopped.
func oldFinishedDelivery(t *testing.T) (*testEnv, app.CreatedMerchant, uuid.UUID) {
	t.Helper()
	e := newTestEnv(t)
	m := e.merchant("")
	stopSub := e.runSubscriber(e.pool)
	_, stopDisp := e.runDispatcher(e.pool, func(d *Dispatcher) { d.Retention = -1 })
	id := e.deposits(m.MerchantID, 1)[0]
	eventually(t, 10*time.Second, "no_endpoint", func() bool { return e.statuses()[StatusNoEndpoint] == 1 })
	stopSub()
	stopDisp()
	if _, err := e.pool.Exec(context.Background(), `UPDATE webhook_deliveries SET finished_at = now() - interval '100 days' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	return e, m, id
}
