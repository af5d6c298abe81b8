package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/httpapi"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/migrations"
	"github.com/escrowd/escrowd/projections"
)

// TestMigrateCommand runs `escrowd migrate` as a process on a database that
// has no schema at all: it creates every table, a second run changes
// nothing and exits 0, and two processes migrating one fresh database at
// once both succeed (the advisory lock serialises them).
func TestMigrateCommand(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewEmptyURL(t)
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tables := []string{"schema_migrations", "es_streams", "es_events", "projection_checkpoints",
		"http_rate_limits", "http_idempotency_keys", "webhook_deliveries", "webhook_attempts", "webhook_retention"}
	present := func() []string {
		t.Helper()
		var got []string
		for _, tb := range tables {
			var ok bool
			if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, "public."+tb).Scan(&ok); err != nil {
				t.Fatal(err)
			}
			if ok {
				got = append(got, tb)
			}
		}
		return got
	}
	if got := present(); len(got) != 0 {
		t.Fatalf("the empty database already has %v", got)
	}
	applied := func() string {
		t.Helper()
		var s string
		if err := conn.QueryRow(ctx, `SELECT coalesce(string_agg(name || '@' || applied_at::text, ',' ORDER BY name), '') FROM schema_migrations`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}

	out, stderr, code := runEscrowd(t, db, "migrate")
	if code != 0 {
		t.Fatalf("first migrate exited %d: %s%s", code, out, stderr)
	}
	if got := present(); len(got) != len(tables) {
		t.Fatalf("after migrate the tables are %v, want %v", got, tables)
	}
	first := applied()
	if n := strings.Count(first, "@"); n != len(migrations.Names()) {
		t.Fatalf("%d migrations recorded, want %d: %s", n, len(migrations.Names()), first)
	}
	var fn bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_proc WHERE proname = 'es_append')`).Scan(&fn); err != nil || !fn {
		t.Fatalf("es_append function missing after migrate: %v", err)
	}

	out, stderr, code = runEscrowd(t, db, "migrate")
	if code != 0 {
		t.Fatalf("second migrate exited %d: %s%s", code, out, stderr)
	}
	if again := applied(); again != first {
		t.Fatalf("second migrate changed schema_migrations:\n%s\nwas\n%s", again, first)
	}

	// The migrated database is usable by the other commands.
	if out, stderr, code = runEscrowd(t, db, "merchant", "create", "--name", "After migrate", "--json"); code != 0 || !strings.Contains(out, `"merchantId"`) {
		t.Fatalf("merchant create after migrate exited %d: %s%s", code, out, stderr)
	}

	// Two processes migrating one fresh database at once.
	db2 := pgtest.NewEmptyURL(t)
	var wg sync.WaitGroup
	codes := make([]int, 2)
	outs := make([]string, 2)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, e, c := runEscrowd(t, db2, "migrate")
			codes[i], outs[i] = c, o+e
		}()
	}
	wg.Wait()
	for i, c := range codes {
		if c != 0 {
			t.Fatalf("concurrent migrate %d exited %d: %s", i, c, outs[i])
		}
	}
	conn2, err := pgx.Connect(ctx, db2)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close(ctx)
	var n int
	if err := conn2.QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil || n != len(migrations.Names()) {
		t.Fatalf("concurrent migrate recorded %d migrations, want %d: %v", n, len(migrations.Names()), err)
	}
}

// createdMerchant is the JSON `merchant create --json` prints.
type createdMerchant struct {
	MerchantID string      `json:"merchantId"`
	Keys       []issuedKey `json:"keys"`
}

// issuedKey is one key as `merchant create` and `key create` print it.
type issuedKey struct {
	KeyID       string `json:"keyId"`
	Key         string `json:"key"`
	Environment string `json:"environment"`
	Role        string `json:"role"`
}

// createMerchantProcess runs `escrowd merchant create` in a child process.
func createMerchantProcess(t *testing.T, db string, args ...string) createdMerchant {
	t.Helper()
	out, stderr, code := runEscrowd(t, db, append([]string{"merchant", "create", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("merchant create exited %d: %s", code, stderr)
	}
	var m createdMerchant
	if err := json.Unmarshal([]byte(out), &m); err != nil || m.MerchantID == "" {
		t.Fatalf("merchant create printed %q: %v", out, err)
	}
	return m
}

// createKeyProcess runs `escrowd key create` in a child process.
func createKeyProcess(t *testing.T, db, merchantID, env, role string) issuedKey {
	t.Helper()
	out, stderr, code := runEscrowd(t, db, "key", "create", "--merchant", merchantID, "--env", env, "--role", role)
	if code != 0 {
		t.Fatalf("key create exited %d: %s", code, stderr)
	}
	var k issuedKey
	if err := json.Unmarshal([]byte(out), &k); err != nil || k.Key == "" || k.KeyID == "" {
		t.Fatalf("key create printed %q: %v", out, err)
	}
	if k.Environment != env || k.Role != role || !strings.HasPrefix(k.Key, "sk_"+env+"_") {
		t.Fatalf("key create printed %+v", k)
	}
	return k
}

// startAPI serves the API over db as `escrowd serve --role api,projector`
// assembles it, configured from the environment, on a test server.
func startAPI(t *testing.T, db string) string {
	t.Helper()
	env := testEnv(t, db)
	cfg := mustConfig(t, db)
	runner := projections.NewRunner(env.Store, env.Pool, nopLogger(), env.Projectors...)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = runner.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	api, err := newAPI(ctx, cfg, env, runner, newRegistry(), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

type apiReply struct {
	Status  int             `json:"status"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

// call sends one request with the key (and Host header, if any) and
// decodes the envelope.
func call(t *testing.T, base, method, path, host, key string, body any) (int, apiReply) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r apiReply
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("%s %s: status %d, body not an envelope: %v", method, path, resp.StatusCode, err)
	}
	return resp.StatusCode, r
}

// TestIssuedKeysAuthenticateAndMerchantCountry: keys printed by
// `escrowd merchant create` and `escrowd key create` (separate processes)
// authenticate against the API in their environment only (chosen by the
// host, per ESCROW_HOSTS), a revoked one stops working, and the merchant's
// --country GH is what a customer created without countryId gets.
func TestIssuedKeysAuthenticateAndMerchantCountry(t *testing.T) {
	ctx := context.Background()
	t.Setenv("ESCROW_HOSTS", "Live.Example.COM=live")
	t.Setenv("ESCROW_DEFAULT_ENVIRONMENT", "test")
	t.Setenv("ESCROW_RATE_LIMIT_PER_MINUTE", "0")
	db := pgtest.NewURL(t)
	m := createMerchantProcess(t, db, "--name", "Accra Goods", "--country", "GH")
	testSA := createKeyProcess(t, db, m.MerchantID, "test", "super_admin")
	testStd := createKeyProcess(t, db, m.MerchantID, "test", "standard")
	liveStd := createKeyProcess(t, db, m.MerchantID, "live", "standard")
	base := startAPI(t, db)
	const liveHost = "live.example.com"

	for _, tc := range []struct {
		what, host, key string
		status          int
		message         string
	}{
		{"new test super-admin key", "", testSA.Key, 200, ""},
		{"new test standard key", "", testStd.Key, 200, ""},
		{"new live key on a live host (any case, with a port)", "LIVE.example.com:443", liveStd.Key, 200, ""},
		{"new live key on the default (test) host", "", liveStd.Key, 403, "Unauthorized Access"},
		{"new test key on a live host", liveHost, testSA.Key, 403, "Unauthorized Access"},
		{"a key of the same shape never issued", "", "sk_test_" + strings.Repeat("A", len(testSA.Key)-len("sk_test_")), 403, "Unauthorized Access"},
		{"the key's digest instead of the key", "", httpapi.KeyDigest(testSA.Key), 403, "Unauthorized Access"},
	} {
		status, r := call(t, base, http.MethodGet, "/v1/customers", tc.host, tc.key, nil)
		if status != tc.status || (tc.message != "" && r.Message != tc.message) {
			t.Errorf("%s: %d %q, want %d %q", tc.what, status, r.Message, tc.status, tc.message)
		}
	}
	// The standard key is a real standard key: customer create is SA only.
	body := map[string]any{"firstname": "Kofi", "lastname": "Mensah", "email": "kofi@example.com", "phone": "0241234567"}
	if status, r := call(t, base, http.MethodPost, "/v1/customer/create", "", testStd.Key, body); status != 401 || r.Message != "Access denied" {
		t.Fatalf("customer create with the standard key: %d %q", status, r.Message)
	}

	// No countryId: the customer inherits the merchant's GH.
	status, r := call(t, base, http.MethodPost, "/v1/customer/create", "", testSA.Key, body)
	if status != 201 {
		t.Fatalf("customer create with the new super-admin key: %d %q %s", status, r.Message, r.Data)
	}
	var c struct {
		CustomerID string `json:"customerId"`
		CountryID  string `json:"countryId"`
		Phone      string `json:"phone"`
		Country    struct {
			ID, ISOCode string
		} `json:"country"`
	}
	if err := json.Unmarshal(r.Data, &c); err != nil {
		t.Fatal(err)
	}
	if c.CountryID != "cty_gh" || c.Country.ISOCode != "GH" || c.Phone != "0241234567" {
		t.Fatalf("customer created without countryId: %s", r.Data)
	}
	// Ghana's dial code spelling names the same customer.
	if status, r := call(t, base, http.MethodGet, "/v1/payment/verify-phone/233241234567", "", testSA.Key, nil); status != 200 || !strings.Contains(string(r.Data), c.CustomerID) {
		t.Fatalf("verify-phone with the GH dial code: %d %q %s", status, r.Message, r.Data)
	}
	env := testEnv(t, db)
	var country string
	if err := env.Pool.QueryRow(ctx, `SELECT country FROM rm_merchants WHERE merchant_id = $1`, m.MerchantID).Scan(&country); err != nil || country != "GH" {
		t.Fatalf("merchant read model country %q: %v", country, err)
	}

	// A key revoked by the command (another process) stops authenticating
	// as soon as the server has read the revocation from the event log:
	// the server caches keys it has seen (this one, used above) and drops
	// them when their merchant's events arrive, milliseconds later.
	if status, _ := call(t, base, http.MethodGet, "/v1/customers", "", testStd.Key, nil); status != 200 {
		t.Fatalf("the standard key before its revocation: %d", status)
	}
	if out, stderr, code := runEscrowd(t, db, "key", "revoke", "--merchant", m.MerchantID, "--key-id", testStd.KeyID); code != 0 {
		t.Fatalf("key revoke exited %d: %s%s", code, out, stderr)
	}
	revokedAt := time.Now()
	for {
		status, r := call(t, base, http.MethodGet, "/v1/customers", "", testStd.Key, nil)
		if status == 403 && r.Message == "Unauthorized Access" {
			break
		}
		if status != 200 || time.Since(revokedAt) > 2*time.Second {
			t.Fatalf("revoked key, %v after the revocation: %d %q", time.Since(revokedAt), status, r.Message)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if status, _ := call(t, base, http.MethodGet, "/v1/customers", "", testSA.Key, nil); status != 200 {
		t.Fatalf("the other key after a revocation: %d", status)
	}
}

// TestKeysAreStoredOnlyAsDigests: after `merchant create` and `key create`
// (and requests made with the keys, so the rate limiter has stored its
// rows), no plaintext key, nor its random part, is anywhere in the
// database: not in the events' data or metadata, not in rm_api_keys, not in
// any other table. The events and rm_api_keys hold its SHA-256 digest.
func TestKeysAreStoredOnlyAsDigests(t *testing.T) {
	ctx := context.Background()
	t.Setenv("ESCROW_HOSTS", "")
	t.Setenv("ESCROW_DEFAULT_ENVIRONMENT", "test")
	t.Setenv("ESCROW_RATE_LIMIT_PER_MINUTE", "10")
	db := pgtest.NewURL(t)
	m := createMerchantProcess(t, db, "--name", "Digest Shop")
	keys := append([]issuedKey{}, m.Keys...)
	keys = append(keys, createKeyProcess(t, db, m.MerchantID, "test", "super_admin"),
		createKeyProcess(t, db, m.MerchantID, "live", "standard"))
	if len(keys) != 6 {
		t.Fatalf("%d keys", len(keys))
	}
	base := startAPI(t, db)
	for _, k := range keys {
		if k.Environment == "test" {
			if status, r := call(t, base, http.MethodGet, "/v1/customers", "", k.Key, nil); status != 200 {
				t.Fatalf("key %s: %d %q", k.KeyID, status, r.Message)
			}
		}
	}
	env := testEnv(t, db)
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		if err := env.Pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	// Every table of the database, as text, row by row.
	rows, err := env.Pool.Query(ctx, `SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) FROM information_schema.tables
		WHERE table_schema NOT IN ('pg_catalog', 'information_schema') AND table_type = 'BASE TABLE'`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) < 5 {
		t.Fatalf("tables %v: %v", tables, err)
	}
	for _, k := range keys {
		secret := k.Key[len("sk_"+k.Environment+"_"):]
		digest := httpapi.KeyDigest(k.Key)
		for _, s := range []string{k.Key, secret} {
			if n := count(`SELECT count(*) FROM es_events WHERE strpos(data::text, $1) > 0 OR strpos(coalesce(metadata::text, ''), $1) > 0`, s); n != 0 {
				t.Errorf("key %s: plaintext in %d events", k.KeyID, n)
			}
			if n := count(`SELECT count(*) FROM rm_api_keys t WHERE strpos(row_to_json(t)::text, $1) > 0`, s); n != 0 {
				t.Errorf("key %s: plaintext in rm_api_keys", k.KeyID)
			}
			for _, tb := range tables {
				if n := count(`SELECT count(*) FROM `+tb+` t WHERE strpos(t::text, $1) > 0`, s); n != 0 {
					t.Errorf("key %s: plaintext in %d rows of %s", k.KeyID, n, tb)
				}
			}
		}
		// The same sweep finds the digest (so it would find the key).
		found := 0
		for _, tb := range tables {
			found += count(`SELECT count(*) FROM `+tb+` t WHERE strpos(t::text, $1) > 0`, digest)
		}
		if found < 2 {
			t.Errorf("key %s: the digest is in %d rows, want at least the event and rm_api_keys", k.KeyID, found)
		}
		if n := count(`SELECT count(*) FROM rm_api_keys WHERE key_id = $1 AND digest = $2 AND merchant_id = $3 AND environment = $4 AND role = $5`,
			k.KeyID, digest, m.MerchantID, k.Environment, k.Role); n != 1 {
			t.Errorf("key %s: rm_api_keys has no row with its SHA-256 digest", k.KeyID)
		}
		if n := count(`SELECT count(*) FROM es_events WHERE stream_id = $1 AND event_type = 'merchant.key_issued' AND data->>'digest' = $2`,
			"merchant-"+m.MerchantID, digest); n != 1 {
			t.Errorf("key %s: %d key-issued events carry its digest, want 1", k.KeyID, n)
		}
	}
}
