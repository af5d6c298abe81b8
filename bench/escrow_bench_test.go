package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
)

// The full escrow lifecycle through HTTP (docs/performance.md, "Escrow
// lifecycle through HTTP"), beside the bare pgbench figure of the same
// process run. It reuses the wallet benchmark's helpers (ledgerClient,
// ledgerPercentile, ledgerMS, pgbenchTPS, BenchmarkPgbenchSingleInsert in
// ledger_bench_test.go).

const (
	// escrowClients are the fixed concurrencies measured: 16 HTTP client
	// goroutines (the same as ledgerClients and pgbench -c 16), and 8, which
	// shows the latency at nearly the same throughput with less queueing.
	escrowClients = ledgerClients
	// escrowSellers sellers create the escrows, in turn.
	escrowSellers = 16
	// escrowMinBuyers buyers at least, each topped up once (the test top-up
	// allows one per customer per 24 h, at most 100,000) to escrowFunding.
	escrowMinBuyers = 64
	escrowFunding   = 100000
	// One escrow of escrowAmount (the minimum), whoPays buyer: the buyer
	// pays escrowDueKobo = amount + 2.5% fee (in kobo); on confirm the seller gets the
	// amount, the merchant the commission (half the fee) and the platform
	// the rest of the fee.
	escrowAmount         = 1000
	escrowDueKobo        = 102500
	escrowCommissionKobo = 1250
	escrowPlatformKobo   = 1250 // fee − commission
	// escrowPerBuyer lifecycles a funded buyer can pay for.
	escrowPerBuyer = escrowFunding * 100 / escrowDueKobo // 97
)

// escrowView is the part of an escrow view the benchmark checks.
type escrowView struct {
	ID           string `json:"id"`
	PaymentToken string `json:"paymentToken"`
	Status       string `json:"status"`
}

// BenchmarkEscrowLifecycleHTTP measures the bare pgbench baseline and then
// the escrow lifecycle through HTTP, as two sub-benchmarks of one run:
//
//   - pgbench: BenchmarkPgbenchSingleInsert itself (16 clients, one
//     single-INSERT transaction per op). It is run here, not left to the
//     top-level benchmark, because this file sorts before
//     ledger_bench_test.go and so runs first; a nested testing.Benchmark
//     would deadlock on the testing package's benchmark lock.
//   - clients=16 and clients=8: benchEscrowLifecycle, which reports its money-moving
//     requests/s as a ratio of the tps measured just before it.
func BenchmarkEscrowLifecycleHTTP(b *testing.B) {
	pgbenchTPS = 0 // the ratio uses this run's baseline or none
	b.Run("pgbench", BenchmarkPgbenchSingleInsert)
	for _, clients := range []int{escrowClients, escrowClients / 2} {
		b.Run("clients="+strconv.Itoa(clients), func(b *testing.B) { benchEscrowLifecycle(b, clients) })
	}
}

// benchEscrowLifecycle runs whole escrow lifecycles through the real
// server (a loopback listener over wiring.API with a live projection
// runner, rate limiting off), at a fixed concurrency of clients client
// goroutines. One op is one lifecycle of three requests:
//
//  1. POST /v1/escrow/create (seller; amount 1000, whoPays buyer): 2xx,
//     status PENDING;
//  2. POST /v1/payment/escrow (buyer, wallet, amount due 1025): 2xx, record
//     status success, escrow status ONGOING (moves money into escrow);
//  3. POST /v1/escrow/confirm-payment/{id} (buyer): 2xx, status COMPLETED
//     (releases it to the seller, merchant and platform).
//
// Pay and confirm are the money-moving requests. Sellers are taken in turn
// from escrowSellers and buyers in turn from max(64, ceil(b.N/97)) buyers
// each funded to 100,000, so no buyer runs out. Afterwards every customer
// wallet (main + escrow), the merchant's balances (GET /v1/merchant/balance)
// and the platform's revenue (rm_balances, not exposed by the API) must sum
// to the initial funding, and each party must hold its expected share.
func benchEscrowLifecycle(b *testing.B, clients int) {
	benchEscrowLifecycleOn(b, clients, newBenchServer(b))
}

// benchEscrowLifecycleOn is benchEscrowLifecycle on the server bs.
func benchEscrowLifecycleOn(b *testing.B, clients int, bs *benchServer) {
	defer bs.close()
	pool, sa, std, c := bs.pool, bs.sa, bs.std, bs.client

	newCustomer := func(i int, kind string, prefix int) string {
		return c.newCustomer(b, sa, fmt.Sprintf("%s%d@example.com", kind, i), fmt.Sprintf("0%d%06d", prefix, i))
	}
	warm := escrowWarmup(b)
	nBuyers := max(escrowMinBuyers, (b.N+warm+escrowPerBuyer-1)/escrowPerBuyer)
	sellers := make([]string, escrowSellers)
	for i := range sellers {
		sellers[i] = newCustomer(i, "s", 8046)
	}
	buyers := make([]string, nBuyers)
	for i := range buyers {
		buyers[i] = newCustomer(i, "b", 8045)
		if _, _, err := c.do("POST", "/v1/payment/topup", std, buyers[i], fmt.Sprintf(`{"amount":%d}`, escrowFunding)); err != nil {
			b.Fatal(err)
		}
	}
	sumWallets := func(ids []string) int64 {
		var total int64
		for _, id := range ids {
			w, err := c.walletCents(std, id)
			if err != nil {
				b.Fatal(err)
			}
			if w < 0 {
				b.Fatalf("wallet of %s is negative: %d kobo", id, w)
			}
			total += w
		}
		return total
	}
	funding := int64(nBuyers) * escrowFunding * 100
	if got := sumWallets(buyers) + sumWallets(sellers); got != funding {
		b.Fatalf("wallets hold %d kobo after the top-ups, want %d", got, funding)
	}
	tps := pgbenchTPS // measured just before, in this run (0 without pgbench)

	run := rand.Int64() // references are unique across b.N runs
	var (
		creates  = make([][]time.Duration, clients)
		pays     = make([][]time.Duration, clients)
		confirms = make([][]time.Duration, clients)
	)
	lifecycle := func(w int, i int64) error {
		seller := sellers[int(i)%escrowSellers]
		buyer := buyers[int(i)%nBuyers]
		env, d, err := c.do("POST", "/v1/escrow/create", std, seller,
			fmt.Sprintf(`{"amount":%d,"purpose":"bench %d","whoPays":"buyer"}`, escrowAmount, i))
		if err != nil {
			return err
		}
		var e escrowView
		if err := json.Unmarshal(env.Data, &e); err != nil || e.ID == "" || e.PaymentToken == "" || e.Status != "PENDING" {
			return fmt.Errorf("create %d: status %q (%v): %s", i, e.Status, err, env.Data)
		}
		creates[w] = append(creates[w], d)

		ref := fmt.Sprintf("es-%x-%d", run, i)
		env, d, err = c.do("POST", "/v1/payment/escrow", std, buyer, fmt.Sprintf(
			`{"amount":%d.%02d,"reference":%q,"transactionType":"escrow","gateway":"wallet","escrowDetails":{"escrowId":%q}}`,
			escrowDueKobo/100, escrowDueKobo%100, ref, e.ID))
		if err != nil {
			return err
		}
		var paid struct {
			Status  string       `json:"status"`
			Escrows []escrowView `json:"escrows"`
		}
		if err := json.Unmarshal(env.Data, &paid); err != nil || paid.Status != "success" ||
			len(paid.Escrows) != 1 || paid.Escrows[0].ID != e.ID || paid.Escrows[0].Status != "ONGOING" {
			return fmt.Errorf("pay %s: (%v): %s", ref, err, env.Data)
		}
		pays[w] = append(pays[w], d)

		env, d, err = c.do("POST", "/v1/escrow/confirm-payment/"+url.PathEscape(e.ID), std, buyer, "")
		if err != nil {
			return err
		}
		var fin escrowView
		if err := json.Unmarshal(env.Data, &fin); err != nil || fin.ID != e.ID || fin.Status != "COMPLETED" {
			return fmt.Errorf("confirm %s: status %q (%v): %s", e.ID, fin.Status, err, env.Data)
		}
		confirms[w] = append(confirms[w], d)
		return nil
	}
	if warm > 0 {
		// A database in service has history and statistics: warm lifecycles
		// first (after the measured ones in numbering), analyze, and measure
		// from there. ANALYZE also drops the plans the connections cached
		// while the tables were empty.
		if err := runCount(clients, int64(b.N), warm, lifecycle); err != nil {
			b.Fatal(err)
		}
		for w := range clients {
			creates[w], pays[w], confirms[w] = creates[w][:0], pays[w][:0], confirms[w][:0]
		}
		if _, err := pool.Exec(context.Background(), `ANALYZE`); err != nil {
			b.Fatal(err)
		}
	}
	database := bs.pool.Config().ConnConfig.Database
	cpuBefore := sampleCPU(database)
	under := bs.store
	if u, ok := under.(interface{ Unwrap() eventstore.Store }); ok {
		under = u.Unwrap() // the sealing codec
	}
	pgStore, _ := under.(*postgres.Store)
	var stats0, stats postgres.AppendStats
	if pgStore != nil {
		stats0 = pgStore.AppendStats()
	}
	elapsed := runClients(b, clients, lifecycle)
	cpu := cpuSince(cpuBefore, database, b.N)
	if pgStore != nil {
		stats = pgStore.AppendStats()
	}

	// Conservation: customers + merchant + platform hold the initial funding,
	// split as the fee rules say.
	n := int64(b.N + warm)
	buyersHold, sellersHold := sumWallets(buyers), sumWallets(sellers)
	env, _, err := c.do("GET", "/v1/merchant/balance", sa, "", "")
	if err != nil {
		b.Fatal(err)
	}
	var mb struct {
		Main   json.Number `json:"mainBalance"`
		Escrow json.Number `json:"escrowBalance"`
	}
	if err := json.Unmarshal(env.Data, &mb); err != nil {
		b.Fatalf("merchant balance: %v: %s", err, env.Data)
	}
	merchantMain, err := benchKobo(mb.Main)
	if err != nil {
		b.Fatal(err)
	}
	merchantEscrow, err := benchKobo(mb.Escrow)
	if err != nil {
		b.Fatal(err)
	}
	var platform int64
	if err := pool.QueryRow(context.Background(), `SELECT coalesce(sum(balance), 0)::bigint FROM rm_balances
		WHERE holder = 'platform' AND merchant_id = $1 AND environment = $2`, bs.merchantID, string(domain.Test)).Scan(&platform); err != nil {
		b.Fatal(err)
	}
	if total := buyersHold + sellersHold + merchantMain + merchantEscrow + platform; total != funding {
		b.Fatalf("money not conserved after %d lifecycles: buyers %d + sellers %d + merchant %d/%d + platform %d = %d kobo, funded %d",
			n, buyersHold, sellersHold, merchantMain, merchantEscrow, platform, total, funding)
	}
	if buyersHold != funding-n*escrowDueKobo || sellersHold != n*escrowAmount*100 ||
		merchantMain != n*escrowCommissionKobo || merchantEscrow != 0 || platform != n*escrowPlatformKobo {
		b.Fatalf("after %d lifecycles: buyers %d (want %d), sellers %d (want %d), merchant main %d (want %d), escrow %d (want 0), platform %d (want %d) kobo",
			n, buyersHold, funding-n*escrowDueKobo, sellersHold, n*escrowAmount*100,
			merchantMain, n*escrowCommissionKobo, merchantEscrow, platform, n*escrowPlatformKobo)
	}

	var cl, pl, fl, all []time.Duration
	for w := range clients {
		cl = append(cl, creates[w]...)
		pl = append(pl, pays[w]...)
		fl = append(fl, confirms[w]...)
	}
	all = append(append(append(all, cl...), pl...), fl...)
	for _, s := range [][]time.Duration{cl, pl, fl, all} {
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	}
	secs := elapsed.Seconds()
	moving := float64(len(pl)+len(fl)) / secs
	b.ReportMetric(float64(len(fl))/secs, "lifecycles/s")
	b.ReportMetric(float64(len(all))/secs, "req/s")
	b.ReportMetric(moving, "money-req/s")
	if calls := stats.Calls - stats0.Calls; calls > 0 {
		// Appends per grouped call, and the share of all appends that went
		// in a group.
		grouped, alone := stats.Grouped-stats0.Grouped, stats.Alone-stats0.Alone
		b.ReportMetric(float64(grouped)/float64(calls), "appends/group")
		b.ReportMetric(100*float64(grouped)/float64(grouped+alone), "grouped-%")
	}
	b.ReportMetric(ledgerMS(ledgerPercentile(all, 0.50)), "req-p50-ms")
	b.ReportMetric(ledgerMS(ledgerPercentile(all, 0.99)), "req-p99-ms")
	b.ReportMetric(ledgerMS(ledgerPercentile(cl, 0.50)), "create-p50-ms")
	b.ReportMetric(ledgerMS(ledgerPercentile(cl, 0.99)), "create-p99-ms")
	b.ReportMetric(ledgerMS(ledgerPercentile(pl, 0.50)), "pay-p50-ms")
	b.ReportMetric(ledgerMS(ledgerPercentile(pl, 0.99)), "pay-p99-ms")
	b.ReportMetric(ledgerMS(ledgerPercentile(fl, 0.50)), "confirm-p50-ms")
	b.ReportMetric(ledgerMS(ledgerPercentile(fl, 0.99)), "confirm-p99-ms")
	// CPU per lifecycle: this process (server, projections and the HTTP
	// clients) and the local PostgreSQL server; less noisy than throughput
	// on a shared host.
	b.ReportMetric(ledgerMS(cpu.selfPerOp), "go-cpu-ms/lc")
	if cpu.pgOK {
		b.ReportMetric(ledgerMS(cpu.pgPerOp), "pg-cpu-ms/lc")
		b.ReportMetric(ledgerMS(cpu.dbPerOp), "pg-db-cpu-ms/lc")
	}
	b.ReportMetric(cpu.stealPct, "steal-%")
	if tps > 0 {
		// Money-moving requests (pay + confirm) per second over bare pgbench
		// single-insert transactions per second, same process run.
		b.ReportMetric(tps, "pgbench-tps")
		b.ReportMetric(moving/tps, "ratio-vs-pgbench")
	}
}

// escrowWarmup is BENCH_WARMUP: lifecycles run before the measured ones
// (default none, so that figures stay comparable with earlier runs).
func escrowWarmup(b *testing.B) int {
	v := os.Getenv("BENCH_WARMUP")
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		b.Fatalf("BENCH_WARMUP=%q: want a number of lifecycles", v)
	}
	return n
}
