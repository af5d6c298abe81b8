package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/projections"
)

// BenchmarkListingPages reads the first and the last page (limit 10) of
// every listing of one merchant with a large history, through the real
// server, and reports p50 and p99 of each (docs/listings.md).
//
// The read models are built directly, not through the log, to reach a
// large size quickly: BENCH_LISTING_ROWS escrows (default 200,000; a third
// sold by the merchant, the rest by one busy seller; each bought by one
// busy buyer, every 4th disputed), twice as many transaction records (half
// the merchant's, half the busy buyer's), a tenth as many customers and
// as many webhook deliveries (inserted without positions; the projectors'
// DDL numbers and counts them, as on an upgrade), and a tenth as many
// events through the event store, which the audit trail projector counts.
// BenchmarkScale builds its store through the event store
// instead; this one is self-contained.
//
// Run: BENCH=ListingPages make bench (BENCH_LISTING_ROWS=20000 for a
// quick check).
func BenchmarkListingPages(b *testing.B) {
	rows := 200_000
	if v, err := strconv.Atoi(os.Getenv("BENCH_LISTING_ROWS")); err == nil && v > 0 {
		rows = v
	}
	bs := newBenchServer(b)
	defer bs.close()
	ctx := bs.ctx
	seller := bs.client.newCustomer(b, bs.sa, "seller@bench.test", "08030000001")
	buyer := bs.client.newCustomer(b, bs.sa, "buyer@bench.test", "08030000002")
	// One real escrow and category give the state the copies take.
	cat, _, err := bs.client.do("POST", "/v1/escrow/category/create", bs.std, "", `{"name":"Phones"}`)
	if err != nil {
		b.Fatal(err)
	}
	var category struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(cat.Data, &category); err != nil {
		b.Fatal(err)
	}
	if _, _, err := bs.client.do("POST", "/v1/escrow/create", bs.std, seller,
		`{"amount":1000,"purpose":"Phone","whoPays":"buyer","categoryId":"`+category.ID+`"}`); err != nil {
		b.Fatal(err)
	}
	if _, _, err := bs.client.do("GET", "/v1/escrow/feeds?limit=1", bs.std, "", ""); err != nil { // the fence: projected
		b.Fatal(err)
	}

	t0 := time.Now()
	for _, sql := range []string{
		`INSERT INTO rm_escrows (id, payment_token, merchant_id, environment, seller_id, buyer_id, status, category_id, deleted,
			state, created_at, disputed_at)
		SELECT g.id, 'PT_' || g.id, e.merchant_id, e.environment, CASE WHEN i % 3 = 0 THEN '' ELSE $2 END, $3,
			(ARRAY['ONGOING', 'COMPLETED', 'PENDING', 'DISPUTED'])[i % 4 + 1], e.category_id, false,
			jsonb_set(jsonb_set(e.state::jsonb, '{id}', to_jsonb(g.id)), '{paymentToken}', to_jsonb('PT_' || g.id))::json,
			e.created_at + i * interval '1 millisecond', CASE WHEN i % 4 = 3 THEN e.created_at + i * interval '1 millisecond' END
		FROM (SELECT * FROM rm_escrows WHERE merchant_id = $1 LIMIT 1) e,
			generate_series(1, $4) i, LATERAL (SELECT 'bench-' || lpad(i::text, 9, '0') AS id) g`,
		`INSERT INTO rm_transactions (id, merchant_id, environment, customer_id, reference, transaction_type, status, record, created_at)
		SELECT gen_random_uuid()::text, $1, 'test', CASE WHEN i % 2 = 0 THEN NULL ELSE $3 END, 'ref-' || i,
			(ARRAY['escrow', 'topup', 'withdrawal'])[i % 3 + 1], 'success',
			json_build_object('reference', 'ref-' || i, 'amount', 1000, 'status', 'success'), now()
		FROM generate_series(1, 2 * $4) i WHERE $2 <> ''`,
		`INSERT INTO rm_customers (customer_id, merchant_id, environment, firstname, lastname, email, phone, country_id,
			created_at, updated_at)
		SELECT gen_random_uuid()::text, $1, 'test', 'Ada', 'Obi', 'c' || i || '@bench.test', '0809' || lpad(i::text, 7, '0'),
			'NG', now(), now()
		FROM generate_series(1, $4 / 10) i WHERE $2 <> '' AND $3 <> ''`,
		`INSERT INTO webhook_deliveries (id, merchant_id, environment, event, body, status, attempts, finished_at)
		SELECT gen_random_uuid(), $1, 'test', 'payment.settled', '\x7b7d', 'delivered', 1, now()
		FROM generate_series(1, $4) i WHERE $2 <> '' AND $3 <> ''`,
	} {
		if _, err := bs.pool.Exec(ctx, sql, bs.merchantID, seller, buyer, rows); err != nil {
			b.Fatal(err)
		}
	}
	for _, p := range []projections.Projector{projections.NewEscrows(), projections.Ledger{}, projections.Customers{}} {
		if _, err := bs.pool.Exec(ctx, p.Schema()); err != nil { // numbers and counts the rows
			b.Fatal(err)
		}
	}
	meta := fmt.Appendf(nil, `{"merchantId":%q,"environment":"test","actor":"bench"}`, bs.merchantID)
	for a := 0; a < rows/10/1000; a++ {
		evs := make([]eventstore.EventData, 1000)
		for k := range evs {
			evs[k] = eventstore.EventData{ID: uuid.New(), Type: "bench.tick", Metadata: meta, Data: []byte(`{}`)}
		}
		if _, err := bs.store.Append(ctx, eventstore.StreamAppend{Stream: fmt.Sprintf("benchlist-%d", a),
			Expected: eventstore.NoStream, Events: evs}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := bs.pool.Exec(ctx, `ANALYZE`); err != nil {
		b.Fatal(err)
	}
	b.Logf("built %d escrows, %d records, %d customers, %d deliveries, %d events in %s",
		rows, 2*rows, rows/10, rows, rows/10/1000*1000, time.Since(t0).Round(time.Second))

	reads := listingReads(bs.sa, bs.std, seller, buyer)
	// The first read waits for the projections to pass the events.
	for t1 := time.Now(); ; time.Sleep(time.Second) {
		if _, _, err := bs.client.do("GET", "/v1/events?limit=1", bs.sa, "", ""); err == nil {
			break
		} else if time.Since(t1) > 10*time.Minute {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		readListingPages(b, bs.client, reads)
	}
}

// listingRead is one listing of the API, read with a key and customer.
type listingRead struct{ name, path, key, cid string }

// listingReads are every listing of the API for a merchant's keys (sa,
// std), a busy seller and a busy buyer.
func listingReads(sa, std, seller, buyer string) []listingRead {
	return []listingRead{
		{"feeds", "/v1/escrow/feeds", std, ""},
		{"feeds status", "/v1/escrow/feeds?status=ongoing", std, ""},
		{"feeds customer", "/v1/escrow/feeds?customerId=" + seller, std, ""},
		{"merchant sales", "/v1/escrow/transactions?type=sales", std, ""},
		{"busy seller sales", "/v1/escrow/transactions?type=sales", std, seller},
		{"busy buyer purchases", "/v1/escrow/transactions?type=buy", std, buyer},
		{"all disputes", "/v1/escrow/all-dispute", std, ""},
		{"customer disputes", "/v1/escrow/dispute/get", std, buyer},
		{"customers", "/v1/customers", std, ""},
		{"payment history", "/v1/payment/history", std, buyer},
		{"merchant transactions", "/v1/merchant/transactions", sa, ""},
		{"categories", "/v1/escrow/category/get", std, ""},
		{"events", "/v1/events", sa, ""},
		{"webhook deliveries", "/v1/merchant/webhook/deliveries", sa, ""},
	}
}

// readListingPages reads the first and the last page (limit 10) of each
// listing 15 times and prints p50 and p99 of each, and returns the
// slowest p50 of all.
func readListingPages(b *testing.B, c *ledgerClient, reads []listingRead) time.Duration {
	b.Helper()
	const iterations = 15
	var slowest time.Duration
	for _, r := range reads {
		sep := "?"
		if strings.Contains(r.path, "?") {
			sep = "&"
		}
		env, _, err := c.do("GET", r.path+sep+"limit=10", r.key, r.cid, "")
		if err != nil {
			b.Fatal(err)
		}
		var first struct {
			Pagination struct {
				Count int64 `json:"count"`
				Pages int64 `json:"pages"`
			} `json:"pagination"`
		}
		if err := json.Unmarshal(env.Data, &first); err != nil {
			b.Fatal(err)
		}
		pages := []int64{1}
		if first.Pagination.Pages > 1 {
			pages = append(pages, first.Pagination.Pages)
		}
		for _, page := range pages {
			var took []time.Duration
			for range iterations {
				_, d, err := c.do("GET", fmt.Sprintf("%s%slimit=10&page=%d", r.path, sep, page), r.key, r.cid, "")
				if err != nil {
					b.Fatal(err)
				}
				took = append(took, d)
			}
			slices.Sort(took)
			which := "first"
			if page != 1 {
				which = "last"
			}
			slowest = max(slowest, ledgerPercentile(took, 0.50))
			// Printed, not logged: a benchmark's log keeps only its first lines.
			fmt.Printf("listing %-22s %-5s page %6d of %7d rows: p50 %6.2f ms  p99 %6.2f ms\n", r.name, which, page,
				first.Pagination.Count, ledgerMS(ledgerPercentile(took, 0.50)), ledgerMS(ledgerPercentile(took, 0.99)))
		}
	}
	return slowest
}
