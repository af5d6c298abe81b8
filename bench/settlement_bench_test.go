package bench

import (
	"fmt"
	"math/rand/v2"
	"net/url"
	"sort"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
)

// The dispute path and the milestone lifecycle through HTTP, beside the
// escrow lifecycle (docs/performance.md). Both run on the same server as
// benchEscrowLifecycle and check conservation afterwards.

// benchParties creates sellers and buyers, each buyer topped up to
// escrowFunding, and returns a function that sums wallets (main + escrow).
func benchParties(b *testing.B, bs *benchServer, sellers, buyers int) (s, bu []string, sum func([]string) int64) {
	b.Helper()
	c := bs.client
	s, bu = make([]string, sellers), make([]string, buyers)
	for i := range s {
		s[i] = c.newCustomer(b, bs.sa, fmt.Sprintf("s%d@example.com", i), fmt.Sprintf("08046%06d", i))
	}
	for i := range bu {
		bu[i] = c.newCustomer(b, bs.sa, fmt.Sprintf("b%d@example.com", i), fmt.Sprintf("08045%06d", i))
		if _, _, err := c.do("POST", "/v1/payment/topup", bs.std, bu[i], fmt.Sprintf(`{"amount":%d}`, escrowFunding)); err != nil {
			b.Fatal(err)
		}
	}
	sum = func(ids []string) int64 {
		var total int64
		for _, id := range ids {
			w, err := c.walletCents(bs.std, id)
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
	return s, bu, sum
}

// benchCreateAndPay creates an escrow with body as seller and pays it as
// buyer (the due is escrowDueKobo): the first two steps of every path.
func benchCreateAndPay(bs *benchServer, path, seller, buyer, body, ref string) (escrowView, json.RawMessage, time.Duration, error) {
	c := bs.client
	env, d, err := c.do("POST", path, bs.std, seller, body)
	if err != nil {
		return escrowView{}, nil, 0, err
	}
	var e escrowView
	if err := json.Unmarshal(env.Data, &e); err != nil || e.ID == "" || e.Status != "PENDING" {
		return e, nil, 0, fmt.Errorf("create: status %q (%v): %s", e.Status, err, env.Data)
	}
	env, d2, err := c.do("POST", "/v1/payment/escrow", bs.std, buyer, fmt.Sprintf(
		`{"amount":%d.%02d,"reference":%q,"transactionType":"escrow","gateway":"wallet","escrowDetails":{"escrowId":%q}}`,
		escrowDueKobo/100, escrowDueKobo%100, ref, e.ID))
	if err != nil {
		return e, nil, 0, err
	}
	var paid struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(env.Data, &paid); err != nil || paid.Status != "success" {
		return e, nil, 0, fmt.Errorf("pay %s: (%v): %s", ref, err, env.Data)
	}
	return e, env.Data, d + d2, nil
}

// reportLatencies reports requests/s, money-moving requests/s and the
// percentiles of every request and of the money-moving ones.
func reportLatencies(b *testing.B, elapsed time.Duration, all, moving []time.Duration, perOp string, cpu cpuReport) {
	for _, s := range [][]time.Duration{all, moving} {
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	}
	secs := elapsed.Seconds()
	b.ReportMetric(float64(b.N)/secs, perOp+"/s")
	b.ReportMetric(float64(len(all))/secs, "req/s")
	b.ReportMetric(float64(len(moving))/secs, "money-req/s")
	b.ReportMetric(ledgerMS(ledgerPercentile(all, 0.50)), "req-p50-ms")
	b.ReportMetric(ledgerMS(ledgerPercentile(all, 0.99)), "req-p99-ms")
	b.ReportMetric(ledgerMS(ledgerPercentile(moving, 0.50)), "money-p50-ms")
	b.ReportMetric(ledgerMS(ledgerPercentile(moving, 0.99)), "money-p99-ms")
	b.ReportMetric(ledgerMS(cpu.selfPerOp), "go-cpu-ms/op")
	if cpu.pgOK {
		b.ReportMetric(ledgerMS(cpu.pgPerOp), "pg-cpu-ms/op")
	}
	b.ReportMetric(cpu.stealPct, "steal-%")
}

// BenchmarkDisputeHTTP: one op is a disputed escrow settled by a split:
// create (1,000, whoPays buyer), pay (1,025), the buyer's dispute, and the
// merchant's SPLIT ruling (600 to the seller, 400 back to the buyer), by
// 16 clients. Pay and resolve move money. Afterwards every wallet holds
// exactly its share and the total is conserved.
func BenchmarkDisputeHTTP(b *testing.B) {
	const clients = escrowClients
	bs := newBenchServer(b)
	defer bs.close()
	nBuyers := max(escrowMinBuyers, (b.N+escrowPerBuyer-1)/escrowPerBuyer)
	sellers, buyers, sum := benchParties(b, bs, escrowSellers, nBuyers)
	funding := int64(nBuyers) * escrowFunding * 100
	run := rand.Int64()
	all, moving := make([][]time.Duration, clients), make([][]time.Duration, clients)
	op := func(w int, i int64) error {
		seller, buyer := sellers[int(i)%len(sellers)], buyers[int(i)%nBuyers]
		start := time.Now()
		e, _, _, err := benchCreateAndPay(bs, "/v1/escrow/create", seller, buyer,
			fmt.Sprintf(`{"amount":%d,"purpose":"bench %d","whoPays":"buyer"}`, escrowAmount, i), fmt.Sprintf("d-%x-%d", run, i))
		if err != nil {
			return err
		}
		payDone := time.Since(start)
		env, d, err := bs.client.do("POST", "/v1/escrow/submit-dispute/"+url.PathEscape(e.PaymentToken), bs.std, buyer, `{"message":"never came"}`)
		if err != nil {
			return err
		}
		var v escrowView
		if err := json.Unmarshal(env.Data, &v); err != nil || v.Status != "DISPUTED" {
			return fmt.Errorf("dispute %s: %s", e.ID, env.Data)
		}
		all[w] = append(all[w], d)
		env, d, err = bs.client.do("POST", "/v1/escrow/dispute/resolve/"+url.PathEscape(e.ID), bs.std, "",
			`{"status":"SPLIT","sellerAmount":600,"buyerAmount":400}`)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(env.Data, &v); err != nil || v.Status != "SPLIT" {
			return fmt.Errorf("resolve %s: %s", e.ID, env.Data)
		}
		all[w] = append(all[w], payDone, d)
		moving[w] = append(moving[w], payDone, d)
		return nil
	}
	database := bs.pool.Config().ConnConfig.Database
	cpuBefore := sampleCPU(database)
	elapsed := runClients(b, clients, op)
	cpu := cpuSince(cpuBefore, database, b.N)

	n := int64(b.N)
	// Per op: the buyer pays 1,025 and gets 400 back; the seller gets 600;
	// the fee of 25 goes to the merchant and the platform.
	if got, want := sum(buyers), funding-n*(escrowDueKobo-40000); got != want {
		b.Fatalf("buyers hold %d kobo, want %d", got, want)
	}
	if got, want := sum(sellers), n*60000; got != want {
		b.Fatalf("sellers hold %d kobo, want %d", got, want)
	}
	var flatAll, flatMoving []time.Duration
	for w := range clients {
		flatAll, flatMoving = append(flatAll, all[w]...), append(flatMoving, moving[w]...)
	}
	reportLatencies(b, elapsed, flatAll, flatMoving, "disputes", cpu)
}

// BenchmarkMilestoneLifecycleHTTP: one op is a milestone escrow of four
// milestones of 250 (create, pay 1,025, four confirms in order), by 16
// clients. Pay and the confirms move money.
func BenchmarkMilestoneLifecycleHTTP(b *testing.B) {
	const clients = escrowClients
	bs := newBenchServer(b)
	defer bs.close()
	nBuyers := max(escrowMinBuyers, (b.N+escrowPerBuyer-1)/escrowPerBuyer)
	sellers, buyers, sum := benchParties(b, bs, escrowSellers, nBuyers)
	funding := int64(nBuyers) * escrowFunding * 100
	run := rand.Int64()
	all, moving := make([][]time.Duration, clients), make([][]time.Duration, clients)
	body := `{"amount":1000,"purpose":"bench %d","whoPays":"buyer","milestones":[{"title":"a","amount":250},` +
		`{"title":"b","amount":250},{"title":"c","amount":250},{"title":"d","amount":250}]}`
	op := func(w int, i int64) error {
		seller, buyer := sellers[int(i)%len(sellers)], buyers[int(i)%nBuyers]
		_, paidData, d, err := benchCreateAndPay(bs, "/v1/escrow/milestone/create", seller, buyer, fmt.Sprintf(body, i), fmt.Sprintf("m-%x-%d", run, i))
		if err != nil {
			return err
		}
		all[w], moving[w] = append(all[w], d), append(moving[w], d)
		var paid struct {
			Escrows []struct {
				ID         string `json:"id"`
				Milestones []struct {
					ID string `json:"id"`
				} `json:"milestones"`
			} `json:"escrows"`
		}
		if err := json.Unmarshal(paidData, &paid); err != nil || len(paid.Escrows) != 1 || len(paid.Escrows[0].Milestones) != 4 {
			return fmt.Errorf("paid milestone escrow (%v): %s", err, paidData)
		}
		e := paid.Escrows[0]
		for k, m := range e.Milestones {
			env, d, err := bs.client.do("POST", "/v1/escrow/milestone/confirm/"+url.PathEscape(e.ID)+"/"+url.PathEscape(m.ID), bs.std, buyer, "")
			if err != nil {
				return err
			}
			var v escrowView
			want := "ONGOING"
			if k == 3 {
				want = "COMPLETED"
			}
			if err := json.Unmarshal(env.Data, &v); err != nil || v.Status != want {
				return fmt.Errorf("confirm %s/%s: %s", e.ID, m.ID, env.Data)
			}
			all[w], moving[w] = append(all[w], d), append(moving[w], d)
		}
		return nil
	}
	database := bs.pool.Config().ConnConfig.Database
	cpuBefore := sampleCPU(database)
	elapsed := runClients(b, clients, op)
	cpu := cpuSince(cpuBefore, database, b.N)
	n := int64(b.N)
	if got, want := sum(buyers), funding-n*escrowDueKobo; got != want {
		b.Fatalf("buyers hold %d kobo, want %d", got, want)
	}
	if got, want := sum(sellers), n*escrowAmount*100; got != want {
		b.Fatalf("sellers hold %d kobo, want %d", got, want)
	}
	var flatAll, flatMoving []time.Duration
	for w := range clients {
		flatAll, flatMoving = append(flatAll, all[w]...), append(flatMoving, moving[w]...)
	}
	reportLatencies(b, elapsed, flatAll, flatMoving, "lifecycles", cpu)
}
