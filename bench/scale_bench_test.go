package bench

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/pgtest"
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
	_ = ctx
}
