package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/internal/wiring"
	"github.com/escrowd/escrowd/projections"
)

// benchClock is the service's clock, moved by the benchmark.
type benchClock struct {
	mu sync.Mutex
	at time.Time
}

func (c *benchClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

func (c *benchClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = c.at.Add(d)
}

// BenchmarkDeadlineRound measures one round of the deadline scheduler
// serve runs (wiring.DeadlineScheduler over the deadlines read model)
// when `due` auto-releases fall due among `pending` deadlines that are not
// due. The due ones are real: auto-release escrows with a one-minute
// window, created and paid through the API before each round (untimed),
// their window-ending reminders sent by an untimed round half-way, so the
// timed round is `due` releases, each an ordinary command that moves the
// money. The pending ones are rows of the read model falling due over the
// coming months, as many escrows' payments would have written them; the
// round must not read them. Its cost should follow `due` and not
// `pending`: ns/deadline stays about the same from 1,000 to 100,000
// pending, ns/op grows with `due`, and a round with nothing due (what
// every process pays each interval) costs about the same at either size.
func BenchmarkDeadlineRound(b *testing.B) {
	for _, c := range []struct{ pending, due int }{{1_000, 0}, {100_000, 0}, {1_000, 10}, {100_000, 10}, {100_000, 100}} {
		b.Run(fmt.Sprintf("pending=%d/due=%d", c.pending, c.due), func(b *testing.B) {
			benchDeadlineRound(b, c.pending, c.due)
		})
	}
}

func benchDeadlineRound(b *testing.B, pending, due int) {
	bs := newBenchServer(b)
	defer bs.close()
	ctx := context.Background()
	clock := &benchClock{at: time.Now().UTC()}
	bs.svc.Engine.Now = clock.Now
	sched := wiring.DeadlineScheduler(bs.svc, projections.NewQueries(bs.pool, nil), zap.NewNop())
	if _, err := bs.pool.Exec(ctx, `
		INSERT INTO rm_escrow_deadlines (escrow_id, kind, merchant_id, environment, due_at)
		SELECT 'pending-' || i, CASE WHEN i % 2 = 0 THEN 'auto_release' ELSE 'window_ending' END, $1, 'test',
			$2::timestamptz + interval '30 days' + make_interval(mins => i)
		FROM generate_series(1, $3) i`, bs.merchantID, clock.Now(), pending); err != nil {
		b.Fatal(err)
	}
	if _, err := bs.pool.Exec(ctx, `ANALYZE rm_escrow_deadlines`); err != nil {
		b.Fatal(err)
	}

	// Buyers topped up to 100,000 pay escrows of 1,000 (1,025 with the fee).
	const perBuyer = 90
	c := bs.client
	seller := c.newCustomer(b, bs.sa, "seller@example.com", "08046000001")
	var buyers []string
	buyer := func(i int) string {
		for len(buyers) <= i/perBuyer {
			n := len(buyers)
			id := c.newCustomer(b, bs.sa, fmt.Sprintf("b%d@example.com", n), fmt.Sprintf("08045%06d", n))
			if _, _, err := c.do("POST", "/v1/payment/topup", bs.std, id, `{"amount":100000}`); err != nil {
				b.Fatal(err)
			}
			buyers = append(buyers, id)
		}
		return buyers[i/perBuyer]
	}
	caughtUp := func() {
		last, err := bs.store.Last(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := bs.runner.WaitFor(ctx, last); err != nil {
			b.Fatal(err)
		}
	}
	round := func(kind escrow.DeadlineKind) {
		acted, err := sched.Round(ctx)
		if want := min(due, 1); err != nil || acted[kind] != due || len(acted) != want {
			b.Fatalf("round acted on %v (%v), want %d %s", acted, err, due, kind)
		}
	}
	paid := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for range due {
			env, _, err := c.do("POST", "/v1/escrow/create", bs.std, seller,
				`{"amount":1000,"purpose":"bench","whoPays":"buyer","maxDelivery":1,"deliveryTimeline":"minutes","autoRelease":true}`)
			if err != nil {
				b.Fatal(err)
			}
			var e struct{ ID string }
			if err := json.Unmarshal(env.Data, &e); err != nil {
				b.Fatal(err)
			}
			if _, _, err := c.do("POST", "/v1/payment/escrow", bs.std, buyer(paid), fmt.Sprintf(
				`{"amount":1025,"reference":"dl-%d","transactionType":"escrow","gateway":"wallet","escrowDetails":{"escrowId":%q}}`,
				paid, e.ID)); err != nil {
				b.Fatal(err)
			}
			paid++
		}
		clock.Advance(30 * time.Second)
		caughtUp()
		if due > 0 {
			round(escrow.WindowEndingDeadline)
		}
		clock.Advance(31 * time.Second)
		caughtUp()
		b.StartTimer()
		round(escrow.AutoReleaseDeadline)
	}
	b.StopTimer()
	if due > 0 {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*due), "ns/deadline")
	}
	var left int
	if err := bs.pool.QueryRow(ctx, `SELECT count(*) FROM rm_escrow_deadlines`).Scan(&left); err != nil || left != pending {
		b.Fatalf("%d deadlines left (%v), want the %d pending", left, err, pending)
	}
}
