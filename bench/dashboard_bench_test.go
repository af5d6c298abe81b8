package bench

import (
	"context"
	"fmt"
	"html"
	"math/rand/v2"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sync"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/httpapi"
	"github.com/escrowd/escrowd/internal/dashauth"
	"github.com/escrowd/escrowd/internal/keyring"
	"github.com/escrowd/escrowd/internal/wiring"
	"github.com/escrowd/escrowd/projections"
	"github.com/escrowd/escrowd/webhooks"
)

// The merchant dashboard's pages (docs/performance.md, "Dashboard pages")
// over one merchant's history made in the set-up through the API:
// dashCustomers customers, dashEscrows escrows in every state (a tenth in
// dispute), and the webhook deliveries of all of it, delivered to a
// receiver on loopback by the subscriber and dispatcher as serve runs them.
const (
	dashSellers   = 40
	dashBuyers    = 60
	dashCustomers = dashSellers + dashBuyers
	dashEscrows   = 300
	// dashSetupClients client goroutines make the history.
	dashSetupClients = 8
	// dashBenchPassword is every dashboard user's password.
	dashBenchPassword = "a long enough passphrase"
)

var (
	dashCSRF   = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	dashSecret = regexp.MustCompile(`id="totp-secret" readonly value="([A-Z2-7]+)"`)
)

// BenchmarkDashboardPages measures GETs of the dashboard's pages of the
// test environment, one sub-benchmark per page, by pageClients logged-in
// owners at once (each with a session of their own, as a merchant's people
// have): overview, escrows (the first page of the list), escrow (a
// disputed escrow with its timeline from the event log and its parties'
// balances), disputes, customers, webhooks (the URL and the first page of
// deliveries) and keys. Every user logs in once in the set-up through the
// setup link, a password and a TOTP code.
func BenchmarkDashboardPages(b *testing.B) {
	var users *dashauth.Store
	bs := newBenchServerWith(b, func(cfg *httpapi.Config, pool *pgxpool.Pool, ring *keyring.Keyring) {
		if ring == nil {
			b.Skip("the dashboard seals its users: BENCH_SEALING=off does not apply")
		}
		users = dashauth.NewStore(pool, ring)
		cfg.Dashboard = users
		cfg.WebhookAllowPrivate = true // the receiver is on loopback
	})
	defer bs.close()
	hooks, stopHooks := dashWebhooks(b, bs)
	defer stopHooks()
	disputed := dashHistory(b, bs, hooks)
	clients := make([]*pageClient, pageClients)
	for i := range clients {
		clients[i] = dashLogin(b, bs, users, fmt.Sprintf("owner%d@shop.example", i))
	}
	database := bs.pool.Config().ConnConfig.Database
	for _, p := range []struct {
		name, path string
		want       []string
	}{
		{"overview", "", []string{"<title>Overview · TEST", `<span class="status">`}},
		{"escrows", "/escrows", []string{"<title>Escrows · TEST", `<span class="status">`}},
		{"escrow", "/escrows/" + disputed, []string{"<title>Escrow ", "escrow.dispute_submitted", `id="balance-Buyer"`}},
		{"disputes", "/disputes", []string{"<title>Disputes · TEST", `<span class="status">DISPUTED</span>`}},
		{"customers", "/customers", []string{"<title>Customers · TEST", `id="customer-`}},
		{"webhooks", "/webhooks", []string{"<title>Webhooks · TEST", `id="delivery-`}},
		{"keys", "/keys", []string{"<title>API keys · TEST", `id="key-`}},
	} {
		b.Run(p.name, func(b *testing.B) { benchPageGets(b, clients, database, "/dashboard/test"+p.path, p.want...) })
	}
}

// dashWebhooks points the merchant's test webhooks at a receiver on
// loopback and runs the subscriber (on its runner, returned) and a
// dispatcher as serve wires them; stop stops them.
func dashWebhooks(b *testing.B, bs *benchServer) (runner *projections.Runner, stop func()) {
	b.Helper()
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	ctx, cancel := context.WithCancel(bs.ctx)
	d := &webhooks.Dispatcher{Pool: bs.pool, Endpoints: wiring.Endpoints(bs.store), Sealer: wiring.Sealer(bs.store), AllowPrivate: true}
	sub := wiring.Subscriber(bs.store, bs.pool)
	sub.Handoff = d
	runner, err := wiring.SubscriberRunner(ctx, bs.store, bs.pool, zap.NewNop(), sub)
	if err != nil {
		cancel()
		rcv.Close()
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = runner.Run(ctx) }()
	go func() { defer wg.Done(); _ = d.Run(ctx) }()
	stop = func() { cancel(); wg.Wait(); rcv.Close() }
	if _, _, err := bs.client.do("PUT", "/v1/merchant/webhook", bs.sa, "", fmt.Sprintf(`{"url":%q}`, rcv.URL)); err != nil {
		stop()
		b.Fatal(err)
	}
	return runner, stop
}

// dashHistory makes the merchant's history through the API: customers
// (the buyers topped up), then dashEscrows escrows of which, by their
// number's last digit, 0-2 stay pending, 3 are paid and disputed by the
// buyer, 4-7 paid and confirmed and 8-9 paid. It waits until the read
// models and the webhook subscriber (on hooks) have all of it and every
// delivery is delivered, and returns the id of a disputed escrow.
func dashHistory(b *testing.B, bs *benchServer, hooks *projections.Runner) (disputed string) {
	b.Helper()
	c := bs.client
	sellers, buyers, _ := benchParties(b, bs, dashSellers, dashBuyers)
	run := rand.Int64()
	var mu sync.Mutex
	err := runCount(dashSetupClients, 0, dashEscrows, func(_ int, i int64) error {
		seller, buyer := sellers[int(i)%len(sellers)], buyers[int(i)%len(buyers)]
		body := fmt.Sprintf(`{"amount":%d,"purpose":"Order %d","whoPays":"buyer","description":"Two pairs of shoes"}`, escrowAmount, i)
		kind := i % 10
		if kind <= 2 {
			_, _, err := c.do("POST", "/v1/escrow/create", bs.std, seller, body)
			return err
		}
		e, _, _, err := benchCreateAndPay(bs, "/v1/escrow/create", seller, buyer, body, fmt.Sprintf("dash-%x-%d", run, i))
		if err != nil {
			return err
		}
		switch {
		case kind == 3:
			env, _, err := c.do("POST", "/v1/escrow/submit-dispute/"+url.PathEscape(e.PaymentToken), bs.std, buyer, `{"message":"The shoes never came"}`)
			if err != nil {
				return err
			}
			var v escrowView
			if err := json.Unmarshal(env.Data, &v); err != nil || v.Status != "DISPUTED" {
				return fmt.Errorf("dispute %s: %s", e.ID, env.Data)
			}
			mu.Lock()
			disputed = e.ID
			mu.Unlock()
		case kind <= 7:
			_, _, err := c.do("POST", "/v1/escrow/confirm-payment/"+url.PathEscape(e.ID), bs.std, buyer, "")
			return err
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := bs.ctx
	last, err := bs.store.Last(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := bs.runner.WaitFor(ctx, last); err != nil {
		b.Fatal(err)
	}
	if err := hooks.WaitFor(ctx, last); err != nil {
		b.Fatal(err)
	}
	// Every delivery delivered: the page lists them, and a backlog would
	// share the cores with the measured reads.
	wait, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var total, left int
	for {
		if err := bs.pool.QueryRow(wait, `SELECT count(*), count(*) FILTER (WHERE status <> 'delivered') FROM webhook_deliveries`).
			Scan(&total, &left); err != nil {
			b.Fatalf("webhook deliveries: %d of %d not delivered: %v", left, total, err)
		}
		if total > 0 && left == 0 {
			break
		}
		select {
		case <-wait.Done():
			b.Fatalf("webhook deliveries: %d of %d not delivered after 2 minutes", left, total)
		case <-time.After(100 * time.Millisecond): // polling the outbox
		}
	}
	b.Logf("history: %d customers, %d escrows (%d disputed), %d webhook deliveries", dashCustomers, dashEscrows, dashEscrows/10, total)
	return disputed
}

// dashLogin makes an owner of the merchant and logs a new browser in as
// the dashboard's tests do: the setup link, the password, then the code
// of the TOTP secret the first login's code page shows.
func dashLogin(b *testing.B, bs *benchServer, users *dashauth.Store, email string) *pageClient {
	b.Helper()
	_, token, err := users.CreateUser(bs.ctx, bs.merchantID, email, dashauth.Owner, "operator", time.Now())
	if err != nil {
		b.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	c := newPageClient(bs.client.base, jar)
	step := func(method, path string, form url.Values, status int, match *regexp.Regexp) (pageAnswer, string) {
		b.Helper()
		a, _, err := c.do(method, path, form)
		if err != nil {
			b.Fatal(err)
		}
		if a.status != status {
			b.Fatalf("%s %s: %d (location %q), want %d: %.2000s", method, path, a.status, a.location, status, a.body)
		}
		if match == nil {
			return a, ""
		}
		m := match.FindStringSubmatch(a.body)
		if m == nil {
			b.Fatalf("%s %s: no %s on the page: %.2000s", method, path, match, a.body)
		}
		return a, html.UnescapeString(m[1])
	}
	_, csrf := step("GET", "/dashboard/setup/"+token, nil, http.StatusOK, dashCSRF)
	if a, _ := step("POST", "/dashboard/setup/"+token, url.Values{"password": {dashBenchPassword},
		"confirm": {dashBenchPassword}, "csrf": {csrf}}, http.StatusSeeOther, nil); a.location != "/dashboard/code" {
		b.Fatalf("setup sends to %q", a.location)
	}
	page, secret := step("GET", "/dashboard/code", nil, http.StatusOK, dashSecret)
	m := dashCSRF.FindStringSubmatch(page.body)
	if m == nil {
		b.Fatalf("no anti-forgery token on the code page: %.2000s", page.body)
	}
	code, err := dashauth.TOTPCode(secret, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	if a, _ := step("POST", "/dashboard/code", url.Values{"code": {code}, "csrf": {html.UnescapeString(m[1])}},
		http.StatusSeeOther, nil); a.location != "/dashboard/test" {
		b.Fatalf("the code sends to %q", a.location)
	}
	return c
}
