package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/projections"
)

// listingCase is one listing request and the SQL that counts its rows
// directly ($1 merchant, $2 environment, then args).
type listingCase struct {
	name, path, cid string
	key             string // "" = the standard key
	count           string
	args            []any
	id              string // the field that identifies a row ("id" by default)
	// order, when set, reads the listing's ids in order ($1, $2 as count):
	// the reference for a listing whose page ceiling is below its size.
	order string
}

// listingPage fetches one page of a listing: its rows and pagination.
func (h *harness) listingPage(lc listingCase, query string) ([]map[string]any, map[string]any) {
	h.t.Helper()
	k := lc.key
	if k == "" {
		k = h.std()
	}
	sep := "?"
	if strings.Contains(lc.path, "?") {
		sep = "&"
	}
	r := h.do(req{path: lc.path + sep + query, key: k, cid: lc.cid})
	if r.Status != 200 {
		h.t.Fatalf("%s %s: %d %s", lc.name, query, r.Status, r.Raw)
	}
	var env struct {
		Data struct {
			Data       []map[string]any `json:"data"`
			Pagination map[string]any   `json:"pagination"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.Raw, &env); err != nil {
		h.t.Fatal(err)
	}
	return env.Data.Data, env.Data.Pagination
}

func (lc listingCase) rowID(row map[string]any) string {
	f := lc.id
	if f == "" {
		f = "id"
	}
	s, _ := row[f].(string)
	return s
}

// sqlCount counts lc's rows in the read models.
func (h *harness) sqlCount(lc listingCase) int64 {
	h.t.Helper()
	var n int64
	args := append([]any{h.m.MerchantID, string(domain.Test)}, lc.args...)
	if err := h.pool.QueryRow(context.Background(), lc.count, args...).Scan(&n); err != nil {
		h.t.Fatalf("%s: %v", lc.name, err)
	}
	return n
}

// listingWorkload runs a mixed workload through the API from workers
// goroutines at once: customers, top-ups (records), categories, escrows
// sold by customers and by the merchant, payments, disputes and deletions.
// It returns a seller and a buyer to filter by.
func (h *harness) listingWorkload(workers, rounds int) (seller, buyer, category string) {
	h.t.Helper()
	seller = h.createCustomer(h.sa(), "seller@x.com", "08035557000")
	buyer = h.funded("buyer@x.com", "08035557001", 100_000)
	for i := 0; i < workers*rounds/40; i++ {
		h.topUp(buyer, 100_000).expect(h.t, 200, "Wallet topped up successfully")
	}
	category = (categoryClient{h: h, key: h.std()}).create(catBody("Kept")).expect(h.t, 201, catCreated).obj()["id"].(string)
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds*10)
	check := func(r resp, status int, what string) map[string]any {
		if r.Status != status {
			errs <- fmt.Errorf("%s: %d %s", what, r.Status, r.Raw)
			return nil
		}
		return r.obj()
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				own := fmt.Sprintf("w%d-%d", w, i)
				r := h.do(req{method: "POST", path: "/v1/customer/create", key: h.sa(), body: map[string]any{
					"firstname": "Ada", "lastname": "Obi", "email": own + "@x.com", "phone": fmt.Sprintf("0803%07d", 1000000+w*1000+i)}})
				cust := check(r, 201, "customer")
				if cust == nil {
					continue
				}
				cid := cust["customerId"].(string)
				check(h.topUp(cid, 1000), 200, "top-up")
				if i%3 == 0 {
					check((categoryClient{h: h, key: h.std()}).create(catBody("C "+own)), 201, "category")
				}
				fields := map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer"}
				if i%2 == 0 {
					fields["categoryId"] = category
				}
				var ids, tokens []string
				for _, by := range []string{seller, "", cid} {
					e := check(h.createEscrow(by, fields, 0), 201, "escrow")
					if e != nil {
						ids, tokens = append(ids, e["id"].(string)), append(tokens, e["paymentToken"].(string))
					}
				}
				if len(ids) < 3 {
					continue
				}
				check(h.pay(buyer, "pay-"+ids[0], 1025, ids[0]), 200, "pay")
				check(h.pay(buyer, "pay-"+ids[1], 1025, ids[1]), 200, "pay merchant sale")
				if i%2 == 0 { // the merchant's sale completes: records on the merchant's ledger
					check(h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + ids[1], key: h.std(), cid: buyer}), 200, "confirm")
				}
				if i%2 == 1 {
					check(h.submitDispute(tokens[0], buyer, "Never came"), 200, "dispute")
				}
				check(h.do(req{method: "DELETE", path: "/v1/escrow/delete/" + tokens[2], key: h.std(), cid: cid}), 200, "delete")
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		h.t.Error(err)
	}
	if h.t.Failed() {
		h.t.FailNow()
	}
	h.caughtUp()
	return seller, buyer, category
}

// listingCases are the listings of the API with the SQL counting each.
func (h *harness) listingCases(seller, buyer, category string) []listingCase {
	esc := `SELECT count(*) FROM rm_escrows WHERE merchant_id = $1 AND environment = $2`
	txn := `SELECT count(*) FROM rm_transactions WHERE merchant_id = $1 AND environment = $2`
	return []listingCase{
		{name: "feeds", path: "/v1/escrow/feeds", count: esc + ` AND NOT deleted`},
		{name: "feeds by status", path: "/v1/escrow/feeds?status=ongoing", count: esc + ` AND NOT deleted AND status = 'ONGOING'`},
		{name: "feeds by category", path: "/v1/escrow/feeds?categoryId=" + category,
			count: esc + ` AND NOT deleted AND category_id = $3`, args: []any{category}},
		{name: "feeds by status and category", path: "/v1/escrow/feeds?status=ongoing&categoryId=" + category,
			count: esc + ` AND NOT deleted AND category_id = $3 AND status = 'ONGOING'`, args: []any{category}},
		{name: "feeds by customer", path: "/v1/escrow/feeds?customerId=" + buyer,
			count: esc + ` AND NOT deleted AND (seller_id = $3 OR buyer_id = $3)`, args: []any{buyer}},
		{name: "feeds by customer and status", path: "/v1/escrow/feeds?status=disputed&customerId=" + seller,
			count: esc + ` AND NOT deleted AND (seller_id = $3 OR buyer_id = $3) AND status = 'DISPUTED'`, args: []any{seller}},
		{name: "merchant sales", path: "/v1/escrow/transactions?type=sales", count: esc + ` AND NOT deleted AND seller_id = ''`},
		{name: "customer sales", path: "/v1/escrow/transactions?type=sales", cid: seller,
			count: esc + ` AND NOT deleted AND seller_id = $3`, args: []any{seller}},
		{name: "customer sales by status", path: "/v1/escrow/transactions?type=sales&status=ongoing", cid: seller,
			count: esc + ` AND NOT deleted AND seller_id = $3 AND status = 'ONGOING'`, args: []any{seller}},
		{name: "customer purchases", path: "/v1/escrow/transactions?type=buy", cid: buyer,
			count: esc + ` AND NOT deleted AND buyer_id = $3`, args: []any{buyer}},
		{name: "all disputes", path: "/v1/escrow/all-dispute", count: esc + ` AND disputed_at IS NOT NULL`},
		{name: "all disputes by status", path: "/v1/escrow/all-dispute?status=disputed",
			count: esc + ` AND disputed_at IS NOT NULL AND status = 'DISPUTED'`},
		{name: "customer disputes", path: "/v1/escrow/dispute/get", cid: buyer,
			count: esc + ` AND disputed_at IS NOT NULL AND (seller_id = $3 OR buyer_id = $3)`, args: []any{buyer}},
		{name: "customers", path: "/v1/customers", id: "customerId",
			count: `SELECT count(*) FROM rm_customers WHERE merchant_id = $1 AND environment = $2`},
		{name: "payment history", path: "/v1/payment/history", cid: buyer,
			count: txn + ` AND customer_id = $3`, args: []any{buyer}},
		{name: "payment history by type", path: "/v1/payment/history?type=escrow", cid: buyer,
			count: txn + ` AND customer_id = $3 AND transaction_type = 'escrow'`, args: []any{buyer}},
		{name: "merchant transactions", path: "/v1/merchant/transactions", key: h.sa(), count: txn + ` AND customer_id IS NULL`},
		{name: "categories", path: "/v1/escrow/category/get",
			count: `SELECT count(*) FROM rm_categories WHERE merchant_id = $1 AND environment = $2 AND deleted_at IS NULL`},
		{name: "events", path: "/v1/events", key: h.sa(), id: "position",
			count: `SELECT count(*) FROM es_events WHERE metadata ->> 'merchantId' = $1 AND metadata ->> 'environment' = $2`},
		{name: "events by type prefix", path: "/v1/events?type=escrow.", key: h.sa(), id: "position",
			count: `SELECT count(*) FROM es_events WHERE metadata ->> 'merchantId' = $1 AND metadata ->> 'environment' = $2
				AND starts_with(event_type, 'escrow.')`},
	}
}

// pagination.count is kept exact while a mixed workload writes
// concurrently through the API: every listing's count equals a count of
// its rows, and so after a rebuild of every read model.
func TestListingCountsStayExactUnderConcurrentWrites(t *testing.T) {
	h := newHarness(t)
	seller, buyer, category := h.listingWorkload(4, 5)
	cases := h.listingCases(seller, buyer, category)
	counts := map[string]float64{}
	for _, lc := range cases {
		_, pg := h.listingPage(lc, "limit=3")
		want := h.sqlCount(lc)
		if pg["count"] != float64(want) || want == 0 {
			t.Errorf("%s: pagination.count %v, rows %d", lc.name, pg["count"], want)
		}
		if pages := (want + 2) / 3; pg["pages"] != float64(max(pages, 1)) {
			t.Errorf("%s: pages %v, want %d", lc.name, pg["pages"], pages)
		}
		counts[lc.name] = pg["count"].(float64)
	}

	// A rebuild of every read model gives the same totals.
	h.projecting.stop()
	for _, p := range projections.All(wired.Sealer(h.store)) {
		if err := projections.Rebuild(context.Background(), h.pool, h.store, p, nil, nil); err != nil {
			t.Fatalf("rebuild %s: %v", p.Name(), err)
		}
	}
	h.projecting.start()
	for _, lc := range cases {
		if _, pg := h.listingPage(lc, "limit=3"); pg["count"] != counts[lc.name] {
			t.Errorf("%s after rebuild: count %v, was %v", lc.name, pg["count"], counts[lc.name])
		}
	}
}

// Page N is a seek, not an OFFSET: every page of every listing equals the
// same rows read with OFFSET from the listing's whole order; past the end
// a page is empty; and the cursor walks every row exactly once.
func TestListingDeepPagesAndCursorMatchOffset(t *testing.T) {
	h := newWebhookHarness(t)
	seller, buyer, category := h.listingWorkload(2, 4)
	h.webhooksCaughtUp()
	cases := append(h.listingCases(seller, buyer, category), listingCase{name: "webhook deliveries",
		path: "/v1/merchant/webhook/deliveries", key: h.sa(),
		count: `SELECT count(*) FROM webhook_deliveries WHERE merchant_id = $1 AND environment = $2`,
		order: `SELECT id::text FROM webhook_deliveries WHERE merchant_id = $1 AND environment = $2 ORDER BY seq DESC`})
	for _, lc := range cases {
		// The whole listing, in one page as large as the ceiling allows,
		// is the reference order.
		all, pg := h.listingPage(lc, "limit=500")
		if lc.order != "" {
			all = h.sqlRows(lc)
		}
		if int(pg["count"].(float64)) != len(all) || h.sqlCount(lc) != int64(len(all)) || len(all) == 0 {
			t.Fatalf("%s: %d rows, count %v", lc.name, len(all), pg["count"])
		}
		for _, limit := range []int{1, 3, 7} {
			pages := (len(all) + limit - 1) / limit
			for page := 1; page <= pages+1; page++ {
				rows, pg := h.listingPage(lc, fmt.Sprintf("limit=%d&page=%d", limit, page))
				lo, hi := min((page-1)*limit, len(all)), min(page*limit, len(all))
				if got, want := ids(lc, rows), ids(lc, all[lo:hi]); !slices.Equal(got, want) {
					t.Fatalf("%s limit %d page %d: %v, want %v", lc.name, limit, page, got, want)
				}
				if last := page >= pages; pg["isLastPage"] != last {
					t.Fatalf("%s limit %d page %d: isLastPage %v", lc.name, limit, page, pg["isLastPage"])
				}
				if next, _ := pg["nextCursor"].(string); (hi < len(all) && next != lc.rowID(all[hi-1])) || (hi >= len(all) && next != "") {
					t.Fatalf("%s limit %d page %d: nextCursor %q", lc.name, limit, page, next)
				}
			}
			// The cursor form walks the same order.
			var walked []string
			query := fmt.Sprintf("limit=%d", limit)
			for steps := 0; ; steps++ {
				rows, pg := h.listingPage(lc, query)
				walked = append(walked, ids(lc, rows)...)
				next, _ := pg["nextCursor"].(string)
				if next == "" || steps > len(all) {
					break
				}
				query = fmt.Sprintf("limit=%d&startingAfter=%s", limit, url.QueryEscape(next))
			}
			if !slices.Equal(walked, ids(lc, all)) {
				t.Fatalf("%s limit %d: cursor walk %v, want %v", lc.name, limit, walked, ids(lc, all))
			}
		}
	}
}

// sqlRows reads lc's rows (their ids) in order with lc.order.
func (h *harness) sqlRows(lc listingCase) []map[string]any {
	h.t.Helper()
	rows, err := h.pool.Query(context.Background(), lc.order, h.m.MerchantID, string(domain.Test))
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	var out []map[string]any
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, map[string]any{"id": id})
	}
	return out
}

func ids(lc listingCase, rows []map[string]any) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = lc.rowID(r)
	}
	return out
}

// A cursor walk while escrows are being created returns every escrow that
// existed when it started exactly once, in order (new ones come before the
// walk's first row, so it never sees them).
func TestListingCursorWalkWhileWriting(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035558000")
	for i := 0; i < 25; i++ {
		h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer"}, 0).expect(t, 201, "")
	}
	lc := listingCase{name: "feeds", path: "/v1/escrow/feeds"}
	before, _ := h.listingPage(lc, "limit=500")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer"}, 0)
		}
	}()
	defer wg.Wait()
	defer close(stop)
	var walked []string
	rows, pg := h.listingPage(lc, "limit=4")
	first := ids(lc, rows)
	walked = append(walked, first...)
	for next, _ := pg["nextCursor"].(string); next != ""; next, _ = pg["nextCursor"].(string) {
		rows, pg = h.listingPage(lc, "limit=4&startingAfter="+next)
		walked = append(walked, ids(lc, rows)...)
	}
	// The walk starts at the newest escrow when it began (maybe one
	// created meanwhile) and then holds every older one once.
	want := ids(lc, before)
	start := slices.Index(walked, want[0])
	if start < 0 || !slices.Equal(walked[start:], want) {
		t.Fatalf("walk %v, want it to end with %v", walked, want)
	}
	seen := map[string]bool{}
	for _, id := range walked {
		if seen[id] {
			t.Fatalf("walk repeats %s", id)
		}
		seen[id] = true
	}
	h.do(req{path: "/v1/escrow/feeds?startingAfter=nope", key: h.std()}).expect(t, 400, projections.ErrUnknownCursor.Error())
}

// The document and the routes agree on the cursor form: every route the
// document pages (a page parameter) takes startingAfter, documented, and
// answers a startingAfter that names no row with 400 (it reads it).
func TestListingCursorDocumentedOnEveryPagedRoute(t *testing.T) {
	h := newWebhookHarness(t)
	cid := h.createCustomer(h.sa(), "c@x.com", "08035559000")
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct {
				Name string `json:"name"`
				Ref  string `json:"$ref"`
			} `json:"parameters"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(OpenAPIDocument, &doc); err != nil {
		t.Fatal(err)
	}
	paged := 0
	for path, item := range doc.Paths {
		for method, op := range item {
			var page, cursor, needsCID bool
			for _, p := range op.Parameters {
				page = page || p.Name == "page"
				cursor = cursor || p.Ref == "#/components/parameters/StartingAfter"
				needsCID = needsCID || p.Ref == "#/components/parameters/CustomerIdRequired"
			}
			if page != cursor {
				t.Errorf("%s %s: page documented %v, startingAfter %v", method, path, page, cursor)
			}
			if !page {
				continue
			}
			paged++
			r := req{path: path + "?startingAfter=00000000-0000-0000-0000-000000000000", key: h.sa()}
			if needsCID {
				r.key, r.cid = h.std(), cid
			}
			if path == "/v1/escrow/transactions" {
				r.path += "&type=sales"
			}
			if got := h.do(r); got.Status != 400 {
				t.Errorf("%s %s with an unknown startingAfter: %d %s", method, path, got.Status, got.Raw)
			}
		}
	}
	if paged < 10 {
		t.Fatalf("%d paged routes documented", paged)
	}
}
