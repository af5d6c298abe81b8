package bench

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/projections"
)

// scaleEvents is the size of the scale benchmark's store: SCALE_EVENTS,
// 1,000,000 by default (docs/performance.md, "One merchant at scale").
func scaleEvents(tb testing.TB) int64 {
	if v := os.Getenv("SCALE_EVENTS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			tb.Fatalf("SCALE_EVENTS=%q: want a positive number of events", v)
		}
		return n
	}
	return 1_000_000
}

func BenchmarkScale(b *testing.B) {
	ctx := context.Background()
	pool := pgtest.NewPool(b)
	store := postgres.New(pool)
	defer store.Close()
	began := time.Now()
	_, n := fillScaleStore(b, store, scaleEvents(b), nil)
	fill := time.Since(began)
	b.Logf("filled %d events in %s (%.0f events/s)", n, fill.Round(time.Millisecond), float64(n)/fill.Seconds())
	b.ReportMetric(float64(n), "events")

	began = time.Now()
	var read int64
	if err := projections.RebuildAll(ctx, pool, store, projections.All(), nil, func(done, _ int64) { read = done }); err != nil {
		b.Fatal(err)
	}
	took := time.Since(began)
	b.Logf("rebuild of every read model: %d events in %s", read, took.Round(time.Millisecond))
	b.ReportMetric(float64(read)/took.Seconds(), "rebuild-events/s")
}
