package bench

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
)

// BenchmarkReadAfterWriteHTTP measures what a read pays for seeing every
// earlier write (httpapi Server.readModels): writes answer without waiting
// for the read models, and a read waits until the projectors have passed
// the newest committed event. One op is a write and the read of what it
// wrote, by the same client: POST /v1/escrow/create, then GET
// /v1/escrow/verify/{paymentToken} (from the read model), which must show
// the escrow. clients goroutines run ops at once, so each read also waits
// for the other clients' writes committed before it. It reports the
// write's and the read's p50/p99.
func BenchmarkReadAfterWriteHTTP(b *testing.B) {
	for _, clients := range []int{escrowClients, 1} {
		b.Run("clients="+strconv.Itoa(clients), func(b *testing.B) { benchReadAfterWrite(b, clients) })
	}
}

func benchReadAfterWrite(b *testing.B, clients int) {
	bs := newBenchServer(b)
	defer bs.close()
	c := bs.client
	seller := c.newCustomer(b, bs.sa, "seller@example.com", "08046000001")
	writes := make([][]time.Duration, clients)
	reads := make([][]time.Duration, clients)
	elapsed := runClients(b, clients, func(w int, i int64) error {
		env, d, err := c.do("POST", "/v1/escrow/create", bs.std, seller,
			fmt.Sprintf(`{"amount":%d,"purpose":"read %d","whoPays":"buyer"}`, escrowAmount, i))
		if err != nil {
			return err
		}
		var e escrowView
		if err := json.Unmarshal(env.Data, &e); err != nil || e.PaymentToken == "" {
			return fmt.Errorf("create %d: %v: %s", i, err, env.Data)
		}
		writes[w] = append(writes[w], d)
		env, d, err = c.do("GET", "/v1/escrow/verify/"+url.PathEscape(e.PaymentToken), bs.std, "", "")
		if err != nil {
			return err
		}
		var got escrowView
		if err := json.Unmarshal(env.Data, &got); err != nil || got.ID != e.ID || got.Status != "PENDING" {
			return fmt.Errorf("read %s: %v: %s", e.PaymentToken, err, env.Data)
		}
		reads[w] = append(reads[w], d)
		return nil
	})
	var wl, rl []time.Duration
	for w := range clients {
		wl, rl = append(wl, writes[w]...), append(rl, reads[w]...)
	}
	for _, s := range [][]time.Duration{wl, rl} {
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	}
	b.ReportMetric(float64(len(rl))/elapsed.Seconds(), "pairs/s")
	b.ReportMetric(ledgerMS(ledgerPercentile(wl, 0.50)), "write-p50-ms")
	b.ReportMetric(ledgerMS(ledgerPercentile(wl, 0.99)), "write-p99-ms")
	b.ReportMetric(ledgerMS(ledgerPercentile(rl, 0.50)), "read-p50-ms")
	b.ReportMetric(ledgerMS(ledgerPercentile(rl, 0.99)), "read-p99-ms")
}
