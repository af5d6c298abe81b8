package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	json "github.com/go-json-experiment/json/v1"

	"github.com/escrowd/escrowd/internal/pgtest"
)

// Wallet transfers through HTTP against a bare pgbench baseline, run in the
// same process against the same PostgreSQL server so that the two figures
// come from the same machine in the same run (docs/performance.md).
//
// Both benchmarks use ledgerClients concurrent clients. One op is one
// transfer (create-intent + verify) for the HTTP benchmark and one
// single-INSERT transaction for pgbench. BenchmarkPgbenchSingleInsert is
// declared first so that it runs first (benchmarks run in source order);
// BenchmarkWalletTransferHTTP then also reports its transfers/s as a ratio
// of the pgbench tps measured just before it.

const (
	// ledgerClients is the fixed concurrency of both benchmarks: 16 HTTP
	// client goroutines, and pgbench -c 16 -j 2.
	ledgerClients = 16
	// ledgerCustomers customers each get one test top-up of ledgerFunding.
	ledgerCustomers = 64
	ledgerFunding   = 100000
	// ledgerTransfer is the amount of each transfer (the minimum amount).
	ledgerTransfer = "100.00"
)

// pgbenchTPS is the tps of the last BenchmarkPgbenchSingleInsert run in this
// process (0 if it did not run), for the ratio.
var pgbenchTPS float64

// ledgerPercentile returns the q-quantile (0..1) of sorted by nearest rank.
func ledgerPercentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ledgerMS(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// findPgbench returns the pgbench binary: on PATH, else the newest under
// /usr/lib/postgresql/*/bin (where scripts/pg.sh takes the server from).
func findPgbench() string {
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p
	}
	cands, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
	sort.Slice(cands, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(cands[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(cands[j]))))
		return vi < vj
	})
	if len(cands) == 0 {
		return ""
	}
	return cands[len(cands)-1]
}

var pgbenchTPSLine = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)

// BenchmarkPgbenchSingleInsert runs the real pgbench against the same
// server: ledgerClients clients (-c 16 -j 2), each transaction one prepared
// INSERT of one row into a small table (a single statement is its own
// transaction: BEGIN, INSERT, COMMIT with one fsync'd commit). The b.N
// transactions are split evenly over the clients (-t). p50/p99 come from
// pgbench's per-transaction log (-l, latency in microseconds).
func BenchmarkPgbenchSingleInsert(b *testing.B) {
	bin := findPgbench()
	if bin == "" {
		b.Skip("pgbench not found on PATH or under /usr/lib/postgresql/*/bin (install postgresql-client)")
	}
	url := pgtest.NewURL(b) // a scratch database, dropped at the end
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	_, err = conn.Exec(ctx, `CREATE TABLE pgbench_single_insert (
		id bigserial PRIMARY KEY,
		n int NOT NULL,
		payload text NOT NULL,
		at timestamptz NOT NULL DEFAULT now())`)
	conn.Close(ctx)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	script := filepath.Join(dir, "insert.sql")
	if err := os.WriteFile(script, []byte("\\set n random(1, 1000000)\n"+
		"INSERT INTO pgbench_single_insert (n, payload) VALUES (:n, 'wallet transfer 100.00 NGN');\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	perClient := max(1, (b.N+ledgerClients-1)/ledgerClients)
	prefix := filepath.Join(dir, "txlog")
	cmd := exec.Command(bin, "-n", "-M", "prepared", "-c", strconv.Itoa(ledgerClients), "-j", "2",
		"-t", strconv.Itoa(perClient), "-f", script, "-l", "--log-prefix", prefix, url)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	b.ResetTimer()
	err = cmd.Run()
	b.StopTimer()
	if err != nil {
		b.Fatalf("pgbench: %v\n%s", err, out.String())
	}
	m := pgbenchTPSLine.FindSubmatch(out.Bytes())
	if m == nil {
		b.Fatalf("pgbench: no tps line in output:\n%s", out.String())
	}
	tps, _ := strconv.ParseFloat(string(m[1]), 64)

	// Per-transaction log lines: client_id transaction_no time(us) script_no
	// time_epoch time_us [...].
	logs, _ := filepath.Glob(prefix + ".*")
	var lat []time.Duration
	for _, f := range logs {
		fh, err := os.Open(f)
		if err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 3 {
				continue
			}
			us, err := strconv.ParseInt(fields[2], 10, 64)
			if err != nil {
				fh.Close()
				b.Fatalf("pgbench log %s: %q: %v", f, sc.Text(), err)
			}
			lat = append(lat, time.Duration(us)*time.Microsecond)
		}
		fh.Close()
	}
	if want := perClient * ledgerClients; len(lat) != want {
		b.Fatalf("pgbench logged %d transactions, want %d:\n%s", len(lat), want, out.String())
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pgbenchTPS = tps
	b.ReportMetric(tps, "tps")
	b.ReportMetric(ledgerMS(ledgerPercentile(lat, 0.50)), "p50-ms")
	b.ReportMetric(ledgerMS(ledgerPercentile(lat, 0.99)), "p99-ms")
}

// ledgerEnvelope is the response body of every route.
type ledgerEnvelope struct {
	Status  int             `json:"status"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

type ledgerClient struct {
	http *http.Client
	base string
}

// do sends one JSON request and fails unless the answer is 2xx. Answers
// are decoded with encoding/json's behaviour on the json/v2 engine (as
// domain.Unmarshal): the clients share the two cores with the server, so
// the less they cost the more of the machine the server gets, as it would
// with its clients elsewhere.
func (c *ledgerClient) do(method, path, key, cid, body string) (ledgerEnvelope, time.Duration, error) {
	var env ledgerEnvelope
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		return env, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if cid != "" {
		req.Header.Set("customer-id", cid)
	}
	t0 := time.Now()
	res, err := c.http.Do(req)
	if err != nil {
		return env, 0, err
	}
	raw, err := io.ReadAll(res.Body)
	res.Body.Close()
	d := time.Since(t0)
	if err != nil {
		return env, d, err
	}
	if res.StatusCode/100 != 2 {
		return env, d, fmt.Errorf("%s %s (customer %s): %d %s", method, path, cid, res.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return env, d, fmt.Errorf("%s %s: %v: %s", method, path, err, raw)
	}
	return env, d, nil
}

// newCustomer creates a customer (super-admin key sa) with email and phone
// and returns its id.
func (c *ledgerClient) newCustomer(b *testing.B, sa, email, phone string) string {
	b.Helper()
	env, _, err := c.do("POST", "/v1/customer/create", sa, "",
		fmt.Sprintf(`{"firstname":"Ada","lastname":"Obi","email":%q,"phone":%q}`, email, phone))
	if err != nil {
		b.Fatal(err)
	}
	var d struct {
		CustomerID string `json:"customerId"`
	}
	if err := json.Unmarshal(env.Data, &d); err != nil || d.CustomerID == "" {
		b.Fatalf("customer create: %v %s", err, env.Data)
	}
	return d.CustomerID
}

// walletCents is a customer's main + escrow balance in kobo.
func (c *ledgerClient) walletCents(key, cid string) (int64, error) {
	env, _, err := c.do("GET", "/v1/wallet", key, cid, "")
	if err != nil {
		return 0, err
	}
	var w struct {
		Main   json.Number `json:"mainBalance"`
		Escrow json.Number `json:"escrowBalance"`
	}
	if err := json.Unmarshal(env.Data, &w); err != nil {
		return 0, err
	}
	return benchKobo(w.Main, w.Escrow)
}

// BenchmarkWalletTransferHTTP moves money between wallets through the real
// server (a loopback listener over wiring.API with a live projection
// runner, rate limiting off). ledgerCustomers customers are each topped up
// to ledgerFunding; then ledgerClients goroutines each repeat one transfer
// of ledgerTransfer between two random distinct customers: POST
// /v1/payment/create-intent (wallet_transfer) then POST /v1/payment/verify,
// the request that moves the money. Every response must be 2xx, and the
// wallets must sum to what they held before (money is conserved).
func BenchmarkWalletTransferHTTP(b *testing.B) {
	bs := newBenchServer(b)
	defer bs.close()
	sa, std, c := bs.sa, bs.std, bs.client

	type cust struct{ id, phone string }
	custs := make([]cust, ledgerCustomers)
	for i := range custs {
		phone := fmt.Sprintf("08032%06d", i)
		id := c.newCustomer(b, sa, fmt.Sprintf("w%d@example.com", i), phone)
		custs[i] = cust{id, phone}
		if _, _, err := c.do("POST", "/v1/payment/topup", std, id, fmt.Sprintf(`{"amount":%d}`, ledgerFunding)); err != nil {
			b.Fatal(err)
		}
	}
	sum := func() int64 {
		var total int64
		for _, cu := range custs {
			w, err := c.walletCents(std, cu.id)
			if err != nil {
				b.Fatal(err)
			}
			if w < 0 {
				b.Fatalf("wallet of %s is negative: %d kobo", cu.id, w)
			}
			total += w
		}
		return total
	}
	before := sum()
	if want := int64(ledgerCustomers * ledgerFunding * 100); before != want {
		b.Fatalf("wallets hold %d kobo after the top-ups, want %d", before, want)
	}

	run := rand.Int64() // references are unique across b.N runs
	var (
		intents  = make([][]time.Duration, ledgerClients)
		verifies = make([][]time.Duration, ledgerClients)
	)
	elapsed := runClients(b, ledgerClients, func(w int, i int64) error {
		from := rand.IntN(ledgerCustomers)
		to := rand.IntN(ledgerCustomers - 1)
		if to >= from {
			to++
		}
		ref := fmt.Sprintf("bench-transfer-%x-%d", run, i) // not in a prefix the service reserves
		_, d, err := c.do("POST", "/v1/payment/create-intent", std, custs[from].id, fmt.Sprintf(
			`{"reference":%q,"amount":%s,"transactionType":"wallet_transfer","walletDetails":{"phone":%q,"narration":"bench"}}`,
			ref, ledgerTransfer, custs[to].phone))
		if err != nil {
			return err
		}
		intents[w] = append(intents[w], d)
		env, d, err := c.do("POST", "/v1/payment/verify", std, custs[from].id, fmt.Sprintf(`{"reference":%q}`, ref))
		if err != nil {
			return err
		}
		var rec struct {
			Status string `json:"status"`
		}
		if err := json.Unmarshal(env.Data, &rec); err != nil || rec.Status != "success" {
			return fmt.Errorf("verify %s: status %q (%v): %s", ref, rec.Status, err, env.Data)
		}
		verifies[w] = append(verifies[w], d)
		return nil
	})
	if after := sum(); after != before {
		b.Fatalf("money not conserved: wallets held %d kobo before the transfers and %d after", before, after)
	}

	var il, vl []time.Duration
	for w := range ledgerClients {
		il = append(il, intents[w]...)
		vl = append(vl, verifies[w]...)
	}
	sort.Slice(il, func(i, j int) bool { return il[i] < il[j] })
	sort.Slice(vl, func(i, j int) bool { return vl[i] < vl[j] })
	transfers := float64(len(vl)) / elapsed.Seconds()
	b.ReportMetric(transfers, "transfers/s")
	b.ReportMetric(float64(len(il)+len(vl))/elapsed.Seconds(), "req/s")
	b.ReportMetric(ledgerMS(ledgerPercentile(vl, 0.50)), "verify-p50-ms")
	b.ReportMetric(ledgerMS(ledgerPercentile(vl, 0.99)), "verify-p99-ms")
	b.ReportMetric(ledgerMS(ledgerPercentile(il, 0.50)), "intent-p50-ms")
	b.ReportMetric(ledgerMS(ledgerPercentile(il, 0.99)), "intent-p99-ms")
	if pgbenchTPS > 0 {
		// Money-moving requests (verifies) per second over bare pgbench
		// single-insert transactions per second, same run.
		b.ReportMetric(transfers/pgbenchTPS, "ratio-vs-pgbench")
	}
}
