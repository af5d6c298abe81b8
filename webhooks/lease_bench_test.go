package webhooks

import (
	"context"
	"fmt"
	"testing"

	"github.com/escrowd/escrowd/internal/pgtest"
)

// BenchmarkWebhookLease measures one lease of 64 rows, as a dispatcher
// with 64 free workers makes it, while the dispatcher remembers 0 to
// 100,000 idle merchants (half prompt, half slow). The outbox holds 1,000
// due rows of 100 merchants never seen answering, interleaved, so the
// window spans all of them; the leased rows are handed back between leases,
// untimed. It reports ms/lease: what every lease costs the Run loop.
func BenchmarkWebhookLease(b *testing.B) {
	for _, remembered := range []int{0, 1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("remembered=%d", remembered), func(b *testing.B) { benchLease(b, remembered) })
	}
}

func benchLease(b *testing.B, remembered int) {
	ctx := context.Background()
	pool := pgtest.NewPool(b)
	if _, err := pool.Exec(ctx, `
		INSERT INTO webhook_deliveries (id, merchant_id, environment, event, body)
		SELECT gen_random_uuid(), 'active-' || (i % 100), 'test', 'payment.settled', '{}'::bytea
		  FROM generate_series(0, 999) AS i`); err != nil {
		b.Fatal(err)
	}
	d := &Dispatcher{Pool: pool}
	d.defaults()
	for i := range remembered {
		if i%2 == 0 {
			d.adm.prompt[fmt.Sprintf("idle-%d", i)] = true
		} else {
			d.adm.slow[fmt.Sprintf("idle-%d", i)] = true
		}
	}
	const n = 64
	b.ResetTimer()
	for b.Loop() {
		got, err := benchLeaseOnce(ctx, d, n)
		if err != nil {
			b.Fatal(err)
		}
		if len(got) != n {
			b.Fatalf("leased %d, want %d", len(got), n)
		}
		b.StopTimer()
		if err := release(ctx, pool, got); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/lease")
}

// benchLeaseOnce is the Run loop's lease of n rows.
func benchLeaseOnce(ctx context.Context, d *Dispatcher, n int) ([]leasedAttempt, error) {
	d.mu.Lock()
	a := d.adm.allot()
	d.mu.Unlock()
	got, _, err := leaseDue(ctx, d.Pool, n, d.Lease, a.full, d.rooms(a))
	return got, err
}
