package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/httpapi"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/keyring"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/internal/wiring"
	"github.com/escrowd/escrowd/projections"
)

// benchServer is the whole service on a fresh database behind a loopback
// listener (projection runner running, rate limiting off), with one
// business merchant and an HTTP client for it.
type benchServer struct {
	ctx        context.Context
	pool       *pgxpool.Pool
	store      eventstore.Store
	merchantID string
	sa, std    string // the merchant's test keys
	client     *ledgerClient
	// svc is the server's command service and runner its projectors, for
	// benchmarks that drive the service's own work (the deadlines).
	svc    *app.Service
	runner *projections.Runner
	// api is the server, for benchmarks that run its workers (the
	// provider events' inbox).
	api   *httpapi.Server
	close func()
}

// newBenchStore is the event store the benchmarks run on.
// BENCH_APPEND_CALLS sets its Store.AppendCalls, only for comparing
// settings by hand (docs/performance.md).
func newBenchStore(pool *pgxpool.Pool) *postgres.Store {
	store := postgres.New(pool)
	if v := os.Getenv("BENCH_APPEND_CALLS"); v != "" {
		store.AppendCalls, _ = strconv.Atoi(v)
	}
	return store
}

func newBenchServer(b *testing.B) *benchServer {
	b.Helper()
	return newBenchServerWith(b, nil)
}

// newBenchServerWith is newBenchServer with configure (when not nil)
// changing the server's configuration before it starts. ring is the
// keyring the store seals with, which the dashboard's users are sealed
// with too.
func newBenchServerWith(b *testing.B, configure func(cfg *httpapi.Config, pool *pgxpool.Pool, ring *keyring.Keyring)) *benchServer {
	b.Helper()
	var ring *keyring.Keyring
	return newBenchServerOn(b, func(pool *pgxpool.Pool) eventstore.Store {
		var store eventstore.Store
		store, ring = sealedBenchStore(b, newBenchStore(pool), pool)
		return store
	}, func(cfg *httpapi.Config, pool *pgxpool.Pool) {
		if configure != nil {
			configure(cfg, pool, ring)
		}
	})
}

// sealedBenchStore is store behind the codec that seals personal fields,
// as every process has it (wiring.Sealed), with a master key of its own,
// and the keyring it seals with. With BENCH_SEALING=off it is store as it
// is and no keyring: the same build without sealing, so that what sealing
// costs can be measured against it alternately in one sitting.
func sealedBenchStore(b *testing.B, store eventstore.Store, pool *pgxpool.Pool) (eventstore.Store, *keyring.Keyring) {
	b.Helper()
	switch v := os.Getenv("BENCH_SEALING"); v {
	case "off":
		return store, nil
	case "", "on":
	default:
		b.Fatalf("BENCH_SEALING=%q: want on or off", v)
	}
	master, err := keyring.GenerateMaster()
	if err != nil {
		b.Fatal(err)
	}
	return wiring.Sealed(store, pool, master)
}

// newBenchServerOn is newBenchServer with the event log in the store
// newStore opens (read models stay in the fresh database), and configure
// (when not nil) changing the server's configuration.
func newBenchServerOn(b *testing.B, newStore func(*pgxpool.Pool) eventstore.Store, configure func(*httpapi.Config, *pgxpool.Pool)) *benchServer {
	b.Helper()
	pool := pgtest.NewPool(b)
	store := newStore(pool)
	ctx, cancel := context.WithCancel(context.Background())
	runner := projections.NewRunner(store, pool, zap.NewNop(), projections.All(wiring.Sealer(store))...)
	done := make(chan struct{})
	go func() { defer close(done); _ = runner.Run(ctx) }()
	cfg := httpapi.Config{DefaultEnvironment: domain.Test, RateLimitPerMinute: 0}
	if configure != nil {
		configure(&cfg, pool)
	}
	api := wiring.API(cfg, store, pool, runner, zap.NewNop(), nil)
	srv := httptest.NewServer(api.Handler())
	bs := &benchServer{ctx: ctx, pool: pool, store: store, svc: api.App(), runner: runner, api: api,
		close: func() { srv.Close(); api.Close(); cancel(); <-done; store.Close() }}
	m, err := api.App().CreateMerchant(ctx, "bench", true, "NG", httpapi.KeyDigest)
	if err != nil {
		bs.close()
		b.Fatal(err)
	}
	if err := runner.WaitFor(ctx, m.Position); err != nil {
		bs.close()
		b.Fatal(err)
	}
	bs.merchantID = m.MerchantID
	for _, k := range m.Keys {
		if k.Environment == domain.Test {
			switch k.Role {
			case merchant.SuperAdmin:
				bs.sa = k.Key
			case merchant.Standard:
				bs.std = k.Key
			}
		}
	}
	bs.client = &ledgerClient{http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}, base: srv.URL}
	return bs
}

// benchKobo sums balances as the API shows them (naira, at most two
// decimals) in kobo, exactly: the conservation checks must not pass through
// floating point.
func benchKobo[N ~string](ns ...N) (int64, error) {
	var total money.Amount
	for _, n := range ns {
		a, err := money.Parse(string(n))
		if err != nil {
			return 0, err
		}
		total += a
	}
	return total.Kobo(), nil
}

// runClients runs b.N operations on clients goroutines (a closed loop: each
// starts its next operation when the last one answered) with the benchmark
// timer running, and returns the time they took. op(w, i) is operation i
// (1..b.N) on goroutine w; the first error stops every goroutine and fails
// the benchmark.
func runClients(b *testing.B, clients int, op func(w int, i int64) error) time.Duration {
	b.Helper()
	b.ResetTimer()
	start := time.Now()
	err := runCount(clients, 0, b.N, op)
	elapsed := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	return elapsed
}

// runCount runs op for i in from+1 … from+n on clients goroutines and
// returns the first error; after one, no operation starts.
func runCount(clients int, from int64, n int, op func(w int, i int64) error) error {
	var (
		next     atomic.Int64
		failed   atomic.Bool
		firstErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)
	next.Store(from)
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := next.Add(1)
				if i > from+int64(n) {
					return
				}
				if err := op(w, i); err != nil {
					errOnce.Do(func() { firstErr = err })
					failed.Store(true)
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}
