package webhooks

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
)

// Receivers dying together must not take every worker. A merchant gets its
// full PerMerchant only after its receiver answered in time; a merchant not
// yet seen answering gets SlowPerMerchant, and once its attempts run past
// SlowAfter all such slow merchants share SlowShare workers. So a healthy
// merchant's messages go out at once, not after every dead message has had
// its attempt. (With PerMerchant alone, the four dead merchants at a cap of
// 4 would fill all 8 workers, round after round, for all 40 messages.)
func TestManyDeadReceiversDoNotStarveOthers(t *testing.T) {
	e := newTestEnv(t)
	hang := make(chan struct{})
	defer close(hang)
	const deadMerchants, perDead = 4, 10
	var (
		dead    []*receiver
		deadIDs []string
	)
	for range deadMerchants {
		r := newReceiver(t, nil, func(hit) int { <-hang; return 200 })
		dead = append(dead, r)
		deadIDs = append(deadIDs, e.merchant(r.srv.URL).MerchantID)
	}
	deadHits := func() int {
		n := 0
		for _, r := range dead {
			n += len(r.all())
		}
		return n
	}
	var cur, peak atomic.Int32
	alive := newReceiver(t, nil, func(hit) int {
		n := cur.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(5 * time.Millisecond)
		cur.Add(-1)
		return 200
	})
	ma := e.merchant(alive.srv.URL)
	e.runSubscriber(e.pool)
	for _, id := range deadIDs {
		e.deposits(id, perDead)
	}
	d, _ := e.runDispatcher(e.pool, func(d *Dispatcher) {
		d.Workers, d.PerMerchant = 8, 4
		// A timeout far longer than the live merchant's drain: the dead
		// receivers' first attempts hold their workers throughout, so the
		// bound below does not depend on how fast this machine is.
		// SlowAfter well above a live attempt (5 ms) even on a loaded
		// machine under -race: at 50 ms a full test run once saw the live
		// merchant marked slow, and the dead ones' share starved it.
		d.Timeout, d.SlowAfter = 5*time.Second, 300*time.Millisecond
		d.SlowPerMerchant, d.SlowShare = 1, 2
		d.Schedule = []time.Duration{time.Hour} // no retries during the test
	})
	// Not yet seen answering, each dead merchant gets one worker.
	eventually(t, 10*time.Second, "one attempt per dead receiver", func() bool { return deadHits() == deadMerchants })
	eventually(t, 10*time.Second, "the dead merchants marked slow", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, id := range deadIDs {
			if !d.adm.slow[id] {
				return false
			}
		}
		return true
	})

	ids := e.deposits(ma.MerchantID, 40)
	eventually(t, 10*time.Second, "the live merchant's messages", func() bool { return len(alive.delivered()) == len(ids) })
	// The dead merchants, slow since their first attempts passed SlowAfter,
	// already hold more than SlowShare workers: they got no more while the
	// live merchant drained (one more SlowShare round at most, should the
	// drain outlast the timeout).
	if n := deadHits(); n > deadMerchants+2 {
		t.Fatalf("dead receivers got %d attempts before the live merchant's %d messages were out; want at most %d of %d",
			n, len(ids), deadMerchants+2, deadMerchants*perDead)
	}
	// And the live merchant, seen answering, ran up to PerMerchant at once.
	if got := peak.Load(); got < 2 {
		t.Fatalf("the live merchant never had more than %d attempts at once", got)
	}
}

// failingEndpoints cannot look any endpoint up.
type failingEndpoints struct{}

func (failingEndpoints) Endpoint(context.Context, string, domain.Environment) (Endpoint, error) {
	return Endpoint{}, errors.New("merchant stream does not decode")
}

// An endpoint that cannot be looked up counts as a failed attempt: the
// message goes through the schedule to failed with every attempt logged,
// instead of retrying its first pause forever and never showing up.
func TestEndpointLookupFailuresReachFailed(t *testing.T) {
	e := newTestEnv(t)
	m := e.merchant("http://127.0.0.1:1/never")
	e.runSubscriber(e.pool)
	ids := e.deposits(m.MerchantID, 1)
	d, _ := e.runDispatcher(e.pool, func(d *Dispatcher) { d.Endpoints = failingEndpoints{} })
	eventually(t, 10*time.Second, "the message failed", func() bool { return e.statuses()["failed"] == len(ids) })
	// Counted as attempts, but no receiver was asked: they say nothing of
	// how it answers, and must not make the merchant prompt (a dead
	// receiver would get PerMerchant workers back after a lookup blip).
	d.mu.Lock()
	slow, prompt := d.adm.slow[m.MerchantID], d.adm.prompt[m.MerchantID]
	d.mu.Unlock()
	if slow || prompt {
		t.Fatalf("after lookup failures only: slow %v, prompt %v; want neither", slow, prompt)
	}
	var attempts, logged int
	var lastErr string
	if err := e.pool.QueryRow(context.Background(), `SELECT attempts, last_error FROM webhook_deliveries WHERE merchant_id = $1`,
		m.MerchantID).Scan(&attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+loggedAttempts+` a JOIN webhook_deliveries d ON d.id = a.delivery_id
		WHERE d.merchant_id = $1`, m.MerchantID).Scan(&logged); err != nil {
		t.Fatal(err)
	}
	if want := len(fastSchedule) + 1; attempts != want || logged != want || lastErr != errEndpointLookup.Error() {
		t.Fatalf("attempts %d, logged %d, last error %q; want %d, %d, %q", attempts, logged, lastErr, want, want, errEndpointLookup)
	}
}

// TestLateAnswerKeepsMerchantSlow: a receiver that answers 2xx, but only
// after SlowAfter, stays slow (its next attempts share the slow lane); only
// an answer within SlowAfter makes a merchant prompt. The late receiver
// answers once the dispatcher has marked it slow, so nothing depends on
// how fast this machine is.
func TestLateAnswerKeepsMerchantSlow(t *testing.T) {
	e := newTestEnv(t)
	var disp atomic.Pointer[Dispatcher]
	var lateID atomic.Value
	marked := func(m string) (slow, prompt bool) {
		d := disp.Load()
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.adm.slow[m], d.adm.prompt[m]
	}
	late := newReceiver(t, nil, func(hit) int {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if slow, _ := marked(lateID.Load().(string)); slow {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		return 200
	})
	quick := newReceiver(t, nil, nil)
	ml, mq := e.merchant(late.srv.URL), e.merchant(quick.srv.URL)
	lateID.Store(ml.MerchantID)
	e.runSubscriber(e.pool)
	// SlowAfter leaves the quick receiver ample time to answer in.
	e.runDispatcher(e.pool, func(d *Dispatcher) {
		disp.Store(d)
		d.Timeout, d.SlowAfter = 30*time.Second, 2*time.Second
	})
	ids := e.deposits(ml.MerchantID, 1)
	qids := e.deposits(mq.MerchantID, 1)
	eventually(t, 20*time.Second, "both delivered", func() bool {
		return len(late.delivered()) == len(ids) && len(quick.delivered()) == len(qids)
	})
	if slow, prompt := marked(ml.MerchantID); !slow || prompt {
		t.Fatalf("late receiver after its 2xx: slow %v, prompt %v; want slow", slow, prompt)
	}
	if slow, prompt := marked(mq.MerchantID); slow || !prompt {
		t.Fatalf("quick receiver: slow %v, prompt %v; want prompt", slow, prompt)
	}
}
