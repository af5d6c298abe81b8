package webhooks

import (
	"sync/atomic"
	"testing"
	"time"
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
	e.runDispatcher(e.pool, func(d *Dispatcher) {
		d.Workers, d.PerMerchant = 8, 4
		d.Timeout, d.SlowAfter = 500*time.Millisecond, 50*time.Millisecond
		d.SlowPerMerchant, d.SlowShare = 1, 2
		d.Schedule = []time.Duration{time.Hour} // no retries during the test
	})
	// Not yet seen answering, each dead merchant gets one worker.
	eventually(t, 10*time.Second, "one attempt per dead receiver", func() bool { return deadHits() == deadMerchants })

	ids := e.deposits(ma.MerchantID, 40)
	eventually(t, 10*time.Second, "the live merchant's messages", func() bool { return len(alive.delivered()) == len(ids) })
	// After the first round timed out, the dead merchants, now slow, got at
	// most SlowShare workers per round while the live merchant drained.
	if n := deadHits(); n > deadMerchants+2*2 {
		t.Fatalf("dead receivers got %d attempts before the live merchant's %d messages were out; want at most %d of %d",
			n, len(ids), deadMerchants+4, deadMerchants*perDead)
	}
	// And the live merchant, seen answering, ran up to PerMerchant at once.
	if got := peak.Load(); got < 2 {
		t.Fatalf("the live merchant never had more than %d attempts at once", got)
	}
}
