package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/internal/wiring"
	"github.com/escrowd/escrowd/webhooks"
)

// BenchmarkWebhookDelivery measures the webhook pipeline end to end: settled
// top-ups are committed to the event log, the subscriber maps them into the
// outbox, the dispatcher signs and POSTs them to a local receiver. One
// iteration is one delivered message. It reports deliveries/s (first commit
// to last delivery) and the commit-to-delivery latency p50/p99, measured at
// the receiver as arrival time minus the message's timestamp (the event's
// recorded time, i.e. the start of its append transaction, so the figure
// includes the commit itself).
//
//   - paced: commits at WEBHOOK_BENCH_RATE messages/s (default 2,000), the
//     load the latency goal is stated at;
//   - burst: commits as fast as the writers can, for the throughput ceiling
//     (latency then includes queueing behind the backlog).
//
// The writers append 10 top-ups (10 payment streams, 20 events) per
// transaction, spread over 8 merchants: committing 2,000 single-event
// transactions a second would measure the event store's append path
// (BenchmarkAppend16Writers) rather than webhooks.
func BenchmarkWebhookDelivery(b *testing.B) {
	rate := 2000
	if v, err := strconv.Atoi(os.Getenv("WEBHOOK_BENCH_RATE")); err == nil && v > 0 {
		rate = v
	}
	b.Run(fmt.Sprintf("paced-%d", rate), func(b *testing.B) { benchWebhooks(b, rate) })
	b.Run("burst", func(b *testing.B) { benchWebhooks(b, 0) })
}

const (
	benchMerchants = 8
	topUpsPerTx    = 10
	benchWriters   = 8
)

func benchWebhooks(b *testing.B, rate int) {
	warmUp := rate // one second of the paced load; none for burst
	pool := pgtest.NewPool(b)
	store := newBenchStore(pool)
	defer store.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The receiver: latency of each message of the current phase, once per
	// id; done closes when the phase has all its messages.
	var (
		mu     sync.Mutex
		seen   = make(map[string]bool, b.N+warmUp)
		lat    []time.Duration
		last   time.Time
		count  int
		target int
		done   chan struct{}
	)
	idKey, tsKey := []byte(`"id":"`), []byte(`"timestamp":"`)
	field := func(body, key []byte) string {
		i := bytes.Index(body, key)
		if i < 0 {
			return ""
		}
		rest := body[i+len(key):]
		j := bytes.IndexByte(rest, '"')
		if j < 0 {
			return ""
		}
		return string(rest[:j])
	}
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		now := time.Now()
		id := field(body, idKey)
		ts, err := time.Parse(webhooks.TimestampFormat, field(body, tsKey))
		if err != nil {
			w.WriteHeader(400)
			return
		}
		mu.Lock()
		if !seen[id] {
			seen[id] = true
			lat = append(lat, now.Sub(ts))
			last = now
			if count++; count == target {
				close(done)
			}
		}
		mu.Unlock()
		w.WriteHeader(200)
	}))
	defer rcv.Close()

	svc := app.NewService(app.NewEngine(store, 1000))
	var merchants []string
	for i := 0; i < benchMerchants; i++ {
		m, err := svc.CreateMerchant(ctx, fmt.Sprintf("bench %d", i), true, "NG", func(k string) string { return k })
		if err != nil {
			b.Fatal(err)
		}
		url := fmt.Sprintf("%s/m%d", rcv.URL, i)
		if _, err := svc.UpdateMerchant(ctx, m.MerchantID, func(merchant.State) ([]domain.Event, error) {
			return []domain.Event{merchant.WebhookURLSet{Environment: domain.Test, URL: url}}, nil
		}); err != nil {
			b.Fatal(err)
		}
		merchants = append(merchants, m.MerchantID)
	}
	// Wired as `escrowd serve` wires them: the subscriber hands its
	// dispatcher what it has room for.
	d := &webhooks.Dispatcher{Pool: pool, Endpoints: wiring.Endpoints(store), Sealer: wiring.Sealer(store), AllowPrivate: true} // the receiver is on loopback
	// WEBHOOK_BENCH_HANDOFF=off measures without the handoff: every first
	// attempt through a lease.
	sub := wiring.Subscriber(store, pool)
	if os.Getenv("WEBHOOK_BENCH_HANDOFF") != "off" {
		sub.Handoff = d
	}
	runner, err := wiring.SubscriberRunner(ctx, store, pool, zap.NewNop(), sub)
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = runner.Run(ctx) }()
	go func() { defer wg.Done(); _ = d.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()
	time.Sleep(200 * time.Millisecond) // runner active, dispatcher listening

	// run commits n messages on the schedule and waits until the receiver
	// has them all; it returns their latencies and the time from the first
	// commit's schedule to the last arrival.
	run := func(n int) ([]time.Duration, time.Duration) {
		mu.Lock()
		lat, count, target, done = make([]time.Duration, 0, n), 0, n, make(chan struct{})
		phaseDone := done
		mu.Unlock()
		batches := (n + topUpsPerTx - 1) / topUpsPerTx
		var next atomic.Int64
		start := time.Now()
		var wwg sync.WaitGroup
		for w := 0; w < benchWriters; w++ {
			wwg.Add(1)
			go func() {
				defer wwg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= batches {
						return
					}
					if rate > 0 {
						// Open loop: batch i is due at its place in the schedule.
						due := start.Add(time.Duration(float64(i*topUpsPerTx) / float64(rate) * float64(time.Second)))
						time.Sleep(time.Until(due))
					}
					k := min(topUpsPerTx, n-i*topUpsPerTx)
					appends := make([]eventstore.StreamAppend, 0, k)
					for j := 0; j < k; j++ {
						appends = append(appends, benchTopUp(merchants[(i*topUpsPerTx+j)%len(merchants)]))
					}
					if _, err := store.Append(ctx, appends...); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wwg.Wait()
		select {
		case <-phaseDone:
		case <-time.After(2*time.Minute + time.Duration(n)*time.Millisecond):
			mu.Lock()
			got := count
			mu.Unlock()
			b.Fatalf("only %d of %d messages delivered", got, n)
		}
		mu.Lock()
		defer mu.Unlock()
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		return lat, last.Sub(start)
	}
	// A first second of the same load warms what a running server has warm
	// (database connections and their caches, keep-alive connections to
	// the receiver, the dispatcher's knowledge that the merchants answer
	// promptly); its figures are reported apart as cold-*.
	var cold []time.Duration
	if warmUp > 0 {
		cold, _ = run(warmUp)
	}
	b.ResetTimer() // also drops metrics reported so far: cold-* come last
	database := pool.Config().ConnConfig.Database
	cpuBefore := sampleCPU(database)
	measured := time.Now()
	lat, elapsed := run(b.N)
	cpu := cpuSince(cpuBefore, database, b.N)
	b.StopTimer()
	if len(cold) > 0 {
		b.ReportMetric(float64(cold[len(cold)*99/100].Microseconds())/1000, "cold-p99-ms")
		b.ReportMetric(float64(cold[len(cold)-1].Microseconds())/1000, "cold-max-ms")
	}
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "deliveries/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	// CPU per message, steadier than latency on a shared host: this
	// process (writers, subscriber, dispatcher and the receiver) and the
	// benchmark database's backends.
	b.ReportMetric(float64(cpu.selfPerOp.Nanoseconds())/1e3, "go-cpu-us/msg")
	if cpu.pgOK {
		b.ReportMetric(float64(cpu.dbPerOp.Nanoseconds())/1e3, "pg-db-cpu-us/msg")
	}
	b.ReportMetric(cpu.stealPct, "steal-%")
	// Where the latency goes, from the outbox of the measured phase: event
	// to enqueue (created_at is the start of the subscriber's transaction)
	// and enqueue to the start of the first attempt.
	// Outcomes are recorded after the receiver has answered: wait for the
	// measured phase's (else the last are missing, or with b.N = 1 all).
	for deadline := time.Now().Add(10 * time.Second); ; {
		var left int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_deliveries
			WHERE created_at >= $1 AND status <> 'delivered'`, measured).Scan(&left); err != nil {
			b.Fatal(err)
		}
		if left == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The attempt is the row's last (numbered attempts), which the row
	// holds; here it is nearly always the first.
	var stages []float64
	if err := pool.QueryRow(context.Background(), `
		SELECT ARRAY[percentile_cont(0.5) WITHIN GROUP (ORDER BY q), percentile_cont(0.99) WITHIN GROUP (ORDER BY q),
		             percentile_cont(0.5) WITHIN GROUP (ORDER BY a), percentile_cont(0.99) WITHIN GROUP (ORDER BY a)]
		  FROM (SELECT extract(epoch FROM d.created_at - (convert_from(d.body, 'UTF8')::json->>'timestamp')::timestamptz) * 1000 AS q,
		               extract(epoch FROM d.last_attempt_at - d.created_at) * 1000 AS a
		          FROM webhook_deliveries d
		         WHERE d.created_at >= $1 AND d.last_attempt = d.attempts) s`, measured).Scan(&stages); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(stages[0], "enqueue-p50-ms")
	b.ReportMetric(stages[1], "enqueue-p99-ms")
	b.ReportMetric(stages[2], "to-attempt-p50-ms")
	b.ReportMetric(stages[3], "to-attempt-p99-ms")
}

// benchTopUp is one settled top-up as the service writes it: its payment
// stream with the pending record, then the settled one.
func benchTopUp(merchantID string) eventstore.StreamAppend {
	id := uuid.Must(uuid.NewV7()).String()
	ref := "TOPUP-" + id
	created, settled, err := payment.TopUp(payment.Intent{ID: id, Reference: ref, Amount: money.Naira(5000),
		CustomerID: "cus-" + id, MerchantID: merchantID, Environment: domain.Test, At: time.Now().UTC()})
	if err != nil {
		panic(err)
	}
	c, _ := json.Marshal(created)
	s, _ := json.Marshal(settled)
	return eventstore.StreamAppend{Stream: "payment-" + payment.StreamID(merchantID, domain.Test, ref), Expected: eventstore.NoStream,
		Events: []eventstore.EventData{{ID: uuid.New(), Type: created.EventType(), Data: c}, {ID: uuid.New(), Type: settled.EventType(), Data: s}}}
}
