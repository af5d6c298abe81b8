package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/reference"
	"github.com/escrowd/escrowd/internal/gateway/paystackgw"
	"github.com/escrowd/escrowd/internal/paystack"
	"github.com/escrowd/escrowd/internal/paystack/paystacksim"
)

// BenchmarkProviderEvents measures Paystack's events end to end through
// the running server, with the test environment on the Paystack simulator:
// signed charge.success events (transfers into customers' dedicated
// accounts) and transfer.success events (bank withdrawals paid out) are
// POSTed to /hooks/paystack/test by providerClients goroutines; the
// server keeps each in its inbox and answers 200, its inbox worker asks
// the simulator about it and moves the money. One iteration is one event
// (half of each kind). It reports events/s, from the first POST to the
// last event processed, the hook's answer latency p50/p99 and the CPU per
// event of that phase (this process, PostgreSQL); after the timer, every event must be done in the inbox, every deposit credited
// once and every withdrawal settled.
func BenchmarkProviderEvents(b *testing.B) {
	const key = "sk_test_bench_provider_events"
	bs := newBenchServer(b)
	defer bs.close()
	c := bs.client
	sim, err := paystacksim.Start(paystacksim.Config{SecretKey: key, WebhookURL: c.base + "/hooks/paystack/test"})
	if err != nil {
		b.Fatal(err)
	}
	defer sim.Close()
	if err := sim.AutoSettleTransfers("", 0); err != nil { // payouts stay pending until settled here
		b.Fatal(err)
	}
	set, err := paystackgw.New(paystackgw.Config{SecretKey: key, BaseURL: sim.URL, DVABank: "test-bank"})
	if err != nil {
		b.Fatal(err)
	}
	bs.svc.Gateways[domain.Test] = set
	go func() { _ = bs.api.ProviderEvents().Run(bs.ctx) }()

	// Customers, each with a dedicated account funded by a transfer whose
	// event the simulator delivers itself.
	type cust struct{ id, account string }
	custs := make([]cust, providerCustomers)
	for i := range custs {
		id := c.newCustomer(b, bs.sa, fmt.Sprintf("pe%d@example.com", i), fmt.Sprintf("08033%06d", i))
		env, _, err := c.do("POST", "/v1/payment/create-intent", bs.std, id,
			fmt.Sprintf(`{"amount":100,"reference":"pe-open-%d","transactionType":"deposit"}`, i))
		if err != nil {
			b.Fatal(err)
		}
		var rec struct {
			DepositAccount struct {
				AccountNumber string `json:"accountNumber"`
			} `json:"depositAccount"`
		}
		if err := json.Unmarshal(env.Data, &rec); err != nil || rec.DepositAccount.AccountNumber == "" {
			b.Fatalf("deposit intent without an account: %v %s", err, env.Data)
		}
		custs[i] = cust{id, rec.DepositAccount.AccountNumber}
		if _, err := sim.PayIntoDedicatedAccount(custs[i].account, providerFunding.Kobo()); err != nil {
			b.Fatal(err)
		}
	}
	// settled waits until want events are done. Every event it waits for
	// is kept before it is called (the hook answered 200), so it polls the
	// pending ones, through their partial index, and counts the done ones
	// once: a count of the whole inbox every few milliseconds would cost
	// PostgreSQL about a tenth of the measured phase's CPU at 4,000 events.
	settled := func(want int) {
		b.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			var pending bool
			if err := bs.pool.QueryRow(bs.ctx, `SELECT EXISTS (SELECT 1 FROM provider_inbox WHERE state = 'pending')`).Scan(&pending); err != nil {
				b.Fatal(err)
			}
			if !pending {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("provider events still pending after 2 minutes")
			}
			time.Sleep(2 * time.Millisecond)
		}
		var done int
		if err := bs.pool.QueryRow(bs.ctx, `SELECT count(*) FROM provider_inbox WHERE state = 'done'`).Scan(&done); err != nil {
			b.Fatal(err)
		}
		if done != want {
			b.Fatalf("%d provider events processed, want %d", done, want)
		}
	}
	if err := sim.WaitIdle(bs.ctx); err != nil {
		b.Fatal(err)
	}
	settled(len(custs))

	// The measured events: the simulator records them without sending.
	payouts, deposits := b.N/2, b.N-b.N/2
	var fee money.Amount
	for i := range payouts {
		cu := custs[i%len(custs)]
		serial := fmt.Sprintf("%09d", 100000+i)
		check, _ := reference.NUBANCheckDigit("058", serial)
		ref := fmt.Sprintf("pe-out-%d", i)
		if _, _, err := c.do("POST", "/v1/payment/create-intent", bs.std, cu.id, fmt.Sprintf(`{"amount":%s,"reference":%q,`+
			`"transactionType":"withdrawal","withdrawalDetails":{"accountNumber":"%s%c","bankCode":"058","narration":"bench"}}`,
			providerPayout, ref, serial, check)); err != nil {
			b.Fatal(err)
		}
		env, _, err := c.do("POST", "/v1/payment/verify", bs.std, cu.id, fmt.Sprintf(`{"reference":%q}`, ref))
		if err != nil {
			b.Fatal(err)
		}
		var rec struct {
			Status string      `json:"status"`
			Fee    json.Number `json:"fee"`
		}
		if err := json.Unmarshal(env.Data, &rec); err != nil || rec.Status != "pending" {
			b.Fatalf("withdrawal %s: %v %s", ref, err, env.Data)
		}
		if fee, err = money.Parse(rec.Fee.String()); err != nil {
			b.Fatal(err)
		}
	}
	sim.SuppressEvents(true)
	from := len(sim.Events())
	for _, tr := range sim.Transfers() {
		if err := sim.SettleTransfer(tr.Reference, paystack.TransferSuccess); err != nil {
			b.Fatal(err)
		}
	}
	for i := range deposits {
		if _, err := sim.PayIntoDedicatedAccount(custs[i%len(custs)].account, providerDeposit.Kobo()); err != nil {
			b.Fatal(err)
		}
	}
	var bodies [][]byte
	for _, d := range sim.Events()[from:] {
		bodies = append(bodies, d.Body)
	}
	if len(bodies) != b.N {
		b.Fatalf("%d events recorded, want %d", len(bodies), b.N)
	}
	// Interleaved, so deposits and payouts arrive together.
	sort.SliceStable(bodies, func(i, j int) bool { return i%2 < j%2 })

	// PROVIDER_BENCH_DELAY (a duration) makes the simulator take that long
	// to answer each measured event's verify, as Paystack does over the
	// internet: the worker's throughput is then its verifies in flight.
	if d := os.Getenv("PROVIDER_BENCH_DELAY"); d != "" {
		delay, err := time.ParseDuration(d)
		if err != nil {
			b.Fatal(err)
		}
		sim.DelayNext(paystack.OpVerifyTransaction, delay, deposits)
		sim.DelayNext(paystack.OpVerifyTransfer, delay, payouts)
	}
	hook := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: providerClients}}
	lat := make([]time.Duration, len(bodies))
	var mu sync.Mutex
	database := bs.pool.Config().ConnConfig.Database
	b.ResetTimer()
	cpuBefore := sampleCPU(database)
	start := time.Now()
	err = runCount(providerClients, 0, len(bodies), func(_ int, i int64) error {
		body := bodies[i-1]
		req, err := http.NewRequest("POST", c.base+"/hooks/paystack/test", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("x-paystack-signature", paystack.Sign(key, body))
		t0 := time.Now()
		res, err := hook.Do(req)
		if err != nil {
			return err
		}
		// Read to its end, or the client cannot reuse the connection.
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		d := time.Since(t0)
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("event %d answered %d", i, res.StatusCode)
		}
		mu.Lock()
		lat[i-1] = d
		mu.Unlock()
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	settled(len(custs) + b.N)
	elapsed := time.Since(start)
	cpu := cpuSince(cpuBefore, database, b.N)
	b.StopTimer()

	// Every deposit credited once, every withdrawal settled.
	head, err := bs.store.Head(bs.ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := bs.runner.WaitFor(bs.ctx, head); err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, cu := range custs {
		w, err := c.walletCents(bs.std, cu.id)
		if err != nil {
			b.Fatal(err)
		}
		total += w
	}
	p, _ := money.Parse(providerPayout)
	want := int64(len(custs))*providerFunding.Kobo() + int64(deposits)*providerDeposit.Kobo() - int64(payouts)*(p+fee).Kobo()
	if total != want {
		b.Fatalf("customers hold %d kobo, want %d", total, want)
	}
	for i := range payouts {
		env, _, err := c.do("POST", "/v1/payment/verify", bs.std, custs[i%len(custs)].id, fmt.Sprintf(`{"reference":"pe-out-%d"}`, i))
		if err != nil {
			b.Fatal(err)
		}
		var rec struct {
			Status string `json:"status"`
		}
		if err := json.Unmarshal(env.Data, &rec); err != nil || rec.Status != "success" {
			b.Fatalf("withdrawal pe-out-%d after its transfer.success: %s", i, env.Data)
		}
	}

	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "hook-p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "hook-p99-ms")
	// CPU per event: this process (server, inbox worker, simulator and
	// the clients), and PostgreSQL.
	b.ReportMetric(float64(cpu.selfPerOp.Microseconds()), "go-cpu-us/ev")
	if cpu.pgOK {
		b.ReportMetric(float64(cpu.pgPerOp.Microseconds()), "pg-cpu-us/ev")
		b.ReportMetric(float64(cpu.dbPerOp.Microseconds()), "pg-db-cpu-us/ev")
	}
	b.ReportMetric(cpu.stealPct, "steal-%")
}

const (
	providerCustomers = 16
	providerClients   = 8
	providerPayout    = "100"
)

var (
	providerFunding = money.Naira(100000)
	providerDeposit = money.Naira(150)
)
