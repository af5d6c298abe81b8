package bench

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
)

// The server-rendered pages through real HTTP on the real server
// (docs/performance.md, "Checkout and payment link pages" and "Dashboard
// pages"): one op is one GET of one page, answered 200 with the page
// whole.

// pageClients client goroutines GET the pages at once.
const pageClients = 4

// pageClient GETs pages of the server; redirects are answers, not
// followed (a page that redirects is not the page measured).
type pageClient struct {
	http *http.Client
	base string
}

func newPageClient(base string, jar http.CookieJar) *pageClient {
	return &pageClient{base: base, http: &http.Client{Jar: jar, Timeout: time.Minute,
		Transport:     &http.Transport{MaxIdleConnsPerHost: 64},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// page answers one request: status, body, Location.
type pageAnswer struct {
	status   int
	body     string
	location string
}

func (c *pageClient) do(method, path string, form url.Values) (pageAnswer, time.Duration, error) {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		return pageAnswer{}, 0, err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	t0 := time.Now()
	res, err := c.http.Do(req)
	if err != nil {
		return pageAnswer{}, 0, err
	}
	raw, err := io.ReadAll(res.Body)
	res.Body.Close()
	d := time.Since(t0)
	return pageAnswer{status: res.StatusCode, body: string(raw), location: res.Header.Get("Location")}, d, err
}

// get fetches path and fails unless it answers 200 with every one of want
// in its body (the parts that show it is the page meant, with its rows,
// not an error page).
func (c *pageClient) get(path string, want ...string) (time.Duration, error) {
	a, d, err := c.do(http.MethodGet, path, nil)
	if err != nil {
		return d, err
	}
	if a.status != http.StatusOK {
		return d, fmt.Errorf("GET %s: %d (location %q), want 200: %.2000s", path, a.status, a.location, a.body)
	}
	for _, w := range want {
		if !strings.Contains(a.body, w) {
			return d, fmt.Errorf("GET %s: the page lacks %q: %.2000s", path, w, a.body)
		}
	}
	return d, nil
}

// benchPageGets measures b.N GETs of path by len(clients) goroutines, each
// with its own client, every answer checked by get: pages/s, p50/p99, the allocations of this process
// (server and clients) and the CPU per page (cpu_bench_test.go).
func benchPageGets(b *testing.B, clients []*pageClient, database, path string, want ...string) {
	b.ReportAllocs()
	lat := make([][]time.Duration, len(clients))
	cpuBefore := sampleCPU(database)
	elapsed := runClients(b, len(clients), func(w int, _ int64) error {
		d, err := clients[w].get(path, want...)
		lat[w] = append(lat[w], d)
		return err
	})
	cpu := cpuSince(cpuBefore, database, b.N)
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "pages/s")
	b.ReportMetric(ledgerMS(ledgerPercentile(all, 0.50)), "p50-ms")
	b.ReportMetric(ledgerMS(ledgerPercentile(all, 0.99)), "p99-ms")
	b.ReportMetric(float64(cpu.selfPerOp.Nanoseconds())/1e3, "go-cpu-us/page")
	if cpu.pgOK {
		b.ReportMetric(float64(cpu.dbPerOp.Nanoseconds())/1e3, "pg-db-cpu-us/page")
	}
	b.ReportMetric(cpu.stealPct, "steal-%")
}

// BenchmarkCheckoutPages measures the buyer's pages: checkout is GET
// /checkout/{session} of an open session over a payable escrow whose buyer
// has the funds (the page with its pay form), link is GET
// /escrow/{paymentToken}, the payment link of a payable escrow (the page
// with its details form and a fresh anti-forgery cookie). Both are opened
// through the API in the set-up; the buyer has the funds, so the checkout
// page opens no deposit.
func BenchmarkCheckoutPages(b *testing.B) {
	bs := newBenchServer(b)
	defer bs.close()
	c := bs.client
	seller := c.newCustomer(b, bs.sa, "seller@example.com", "08047000001")
	buyer := c.newCustomer(b, bs.sa, "buyer@example.com", "08047000002")
	if _, _, err := c.do("POST", "/v1/payment/topup", bs.std, buyer, fmt.Sprintf(`{"amount":%d}`, escrowFunding)); err != nil {
		b.Fatal(err)
	}
	create := func(purpose string) escrowView {
		env, _, err := c.do("POST", "/v1/escrow/create", bs.std, seller,
			fmt.Sprintf(`{"amount":%d,"purpose":%q,"whoPays":"buyer","description":"A used bicycle, 21 gears"}`, escrowAmount, purpose))
		if err != nil {
			b.Fatal(err)
		}
		var e escrowView
		if err := json.Unmarshal(env.Data, &e); err != nil || e.PaymentToken == "" || e.Status != "PENDING" {
			b.Fatalf("create: %v: %s", err, env.Data)
		}
		return e
	}
	checkoutEscrow, linkEscrow := create("Blue bicycle"), create("Red bicycle")
	env, _, err := c.do("POST", "/v1/checkout/sessions", bs.std, "",
		fmt.Sprintf(`{"paymentToken":%q,"customerId":%q,"expiresInMinutes":1440}`, checkoutEscrow.PaymentToken, buyer))
	if err != nil {
		b.Fatal(err)
	}
	var session struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(env.Data, &session); err != nil || session.ID == "" {
		b.Fatalf("checkout session: %v: %s", err, env.Data)
	}
	clients := make([]*pageClient, pageClients)
	for i := range clients {
		clients[i] = newPageClient(c.base, nil)
	}
	database := bs.pool.Config().ConnConfig.Database
	for _, p := range []struct{ name, path, want string }{
		{"checkout", "/checkout/" + session.ID, `action="/checkout/` + session.ID + `/pay"`},
		{"link", "/escrow/" + linkEscrow.PaymentToken, `action="/escrow/` + linkEscrow.PaymentToken + `"`},
	} {
		b.Run(p.name, func(b *testing.B) { benchPageGets(b, clients, database, p.path, p.want) })
	}
}
