package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/httpapi"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/internal/wiring"
	"github.com/escrowd/escrowd/projections"
)

// fillCustomerStream writes n events to one customer stream.
func fillCustomerStream(b *testing.B, store eventstore.Store, id string, n int) {
	b.Helper()
	ctx := context.Background()
	created, _ := json.Marshal(customer.Created{CustomerID: id, MerchantID: "m", Environment: domain.Test,
		Firstname: "A", Lastname: "B", Email: "a@b.co", Phone: "08031234567", CountryID: "cty_ng"})
	first := true
	for written := 0; written < n; {
		batch := min(1000, n-written)
		var evs []eventstore.EventData
		for i := 0; i < batch; i++ {
			typ, data := "customer.permissions_changed", []byte(`{"permissions":{"canBuy":true,"canSell":true,"canWithdraw":true}}`)
			if first {
				typ, data, first = "customer.created", created, false
			}
			evs = append(evs, eventstore.EventData{ID: uuid.New(), Type: typ, Data: data})
		}
		if _, err := store.Append(ctx, eventstore.StreamAppend{Stream: "customer-" + id, Expected: eventstore.Any, Events: evs}); err != nil {
			b.Fatal(err)
		}
		written += batch
	}
}

// BenchmarkAggregateLoad measures loading an aggregate through the command
// engine at 100 and 100,000 events: cold (a fresh engine folds the whole
// stream once) and warm (the cache catches up from its last revision, which
// is what commands pay).
func BenchmarkAggregateLoad(b *testing.B) {
	pool := pgtest.NewPool(b)
	store := postgres.New(pool)
	defer store.Close()
	for _, n := range []int{100, 100_000} {
		id := fmt.Sprintf("agg%d", n)
		fillCustomerStream(b, store, id, n)
		b.Run(fmt.Sprintf("events=%d/cold", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				e := app.NewEngine(store, 10)
				if _, rev, err := app.Load(context.Background(), e, app.CustomerKind, id); err != nil || rev != int64(n-1) {
					b.Fatal(err, rev)
				}
			}
		})
		b.Run(fmt.Sprintf("events=%d/warm", n), func(b *testing.B) {
			e := app.NewEngine(store, 10)
			if _, _, err := app.Load(context.Background(), e, app.CustomerKind, id); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, rev, err := app.Load(context.Background(), e, app.CustomerKind, id); err != nil || rev != int64(n-1) {
					b.Fatal(err, rev)
				}
			}
		})
	}
}

// BenchmarkCustomerCreateHTTP drives POST /v1/customer/create through the
// real server (auth, append, wait for the read model, read back) at a fixed
// concurrency and reports requests/s and p50/p99: without an
// Idempotency-Key, and with a fresh one per request (reservation row, the
// reservation's marker event in the append, stored response).
func BenchmarkCustomerCreateHTTP(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchCustomerCreate(b, false) })
	b.Run("idempotency-key", func(b *testing.B) { benchCustomerCreate(b, true) })
}

func benchCustomerCreate(b *testing.B, keyed bool) {
	pool := pgtest.NewPool(b)
	store, _ := sealedBenchStore(b, postgres.New(pool), pool)
	defer store.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runner := projections.NewRunner(store, pool, zap.NewNop(), projections.All(wiring.Sealer(store))...)
	go func() { _ = runner.Run(ctx) }()
	api := wiring.API(httpapi.Config{DefaultEnvironment: domain.Test}, store, pool, runner, zap.NewNop(), nil)
	defer api.Close()
	svc := api.App()
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()
	m, err := svc.CreateMerchant(ctx, "bench", true, "NG", httpapi.KeyDigest)
	if err != nil {
		b.Fatal(err)
	}
	if err := runner.WaitFor(ctx, m.Position); err != nil {
		b.Fatal(err)
	}
	var sa string
	for _, k := range m.Keys {
		if k.Environment == domain.Test && k.Role == merchant.SuperAdmin {
			sa = k.Key
		}
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	const workers = 16
	var (
		next int64
		mu   sync.Mutex
		lat  []time.Duration
		wg   sync.WaitGroup
	)
	database := pool.Config().ConnConfig.Database
	b.ResetTimer()
	cpu0 := sampleCPU(database)
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := atomic.AddInt64(&next, 1)
				if i > int64(b.N) {
					return
				}
				body := fmt.Sprintf(`{"firstname":"Ada","lastname":"Obi","email":"c%d@example.com","phone":"080%08d"}`, i, i)
				req, _ := http.NewRequest("POST", srv.URL+"/v1/customer/create", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+sa)
				req.Header.Set("Content-Type", "application/json")
				if keyed {
					req.Header.Set("Idempotency-Key", fmt.Sprintf("create-%d", i))
				}
				t0 := time.Now()
				res, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				// Read to its end, or the client cannot reuse the connection.
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				d := time.Since(t0)
				if res.StatusCode != 201 {
					b.Errorf("status %d", res.StatusCode)
					return
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuSince(cpu0, database, len(lat))
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "req/s")
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		// CPU per customer created: this process (server, projections and
		// the HTTP clients) and the benchmark's database backends.
		b.ReportMetric(ledgerMS(cpu.selfPerOp), "go-cpu-ms/op")
		if cpu.pgOK {
			b.ReportMetric(ledgerMS(cpu.dbPerOp), "pg-db-cpu-ms/op")
		}
		b.ReportMetric(cpu.stealPct, "steal-%")
	}
}
