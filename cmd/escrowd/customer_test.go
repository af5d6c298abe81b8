package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/projections"
)

// TestCustomerForgetErasesPersonalDataKeepsMoney: after `customer forget`
// the API serving meanwhile (without a restart), the event export and the
// rebuilt read models show "[erased]" for the customer's names, email,
// phone and bank account, the amounts and references stay, the audit is
// clean, their email and phone are free again, and another customer is
// untouched. An unknown customer, or one of another merchant, is refused.
func TestCustomerForgetErasesPersonalDataKeepsMoney(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewURL(t)
	env := testEnv(t, db)
	var last eventstore.Position
	a := newShop(t, env, db, "Shop", "08031110001", &last)
	b := newShop(t, env, db, "Other", "08031110002", &last)
	if err := projections.CatchUpTo(ctx, env.Store, env.Pool, nil, last, env.Projectors...); err != nil {
		t.Fatal(err)
	}
	key := createKeyProcess(t, db, a.merchantID, "test", "super_admin").Key
	t.Setenv("ESCROW_RATE_LIMIT_PER_MINUTE", "0") // the test polls
	base := startAPI(t, db)
	get := func(path string) string {
		t.Helper()
		code, r := call(t, base, "GET", path, "", key, nil)
		if code != 200 {
			t.Fatalf("GET %s: %d %s", path, code, r.Message)
		}
		return string(r.Data)
	}
	before := get("/v1/customer/get/" + a.customerID)
	if !strings.Contains(before, "08031110001@x.co") || !strings.Contains(before, "Ada") {
		t.Fatalf("before: %s", before)
	}
	history := func() string { t.Helper(); return paymentHistory(t, base, key, a.customerID) }
	txBefore := history()
	if !strings.Contains(txBefore, "accountNumber") {
		t.Fatalf("transactions before: %s", txBefore)
	}

	if _, err := cli(t, db, "customer", "forget", "--merchant", b.merchantID, "--customer", a.customerID); err == nil || !strings.Contains(err.Error(), "Customer not found") {
		t.Fatalf("another merchant's customer: %v", err)
	}
	if _, err := cli(t, db, "customer", "forget", "--merchant", a.merchantID, "--customer", "nope"); err == nil || !strings.Contains(err.Error(), "Customer not found") {
		t.Fatalf("unknown customer: %v", err)
	}
	out, err := cli(t, db, "customer", "forget", "--merchant", a.merchantID, "--customer", a.customerID)
	if err != nil || !strings.Contains(out, "forgotten") {
		t.Fatalf("forget: %v %s", err, out)
	}

	// The erasure is on record, the operator as its actor; asked again,
	// nothing more is recorded.
	erasures := func() []eventstore.RecordedEvent {
		t.Helper()
		events, err := env.Store.ReadStream(ctx, app.CustomerKind.StreamName(a.customerID), 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var found []eventstore.RecordedEvent
		for _, e := range events {
			if e.Type == "customer.erased" {
				found = append(found, e)
			}
		}
		return found
	}
	erased := erasures()
	var meta domain.Meta
	if len(erased) != 1 || json.Unmarshal(erased[0].Metadata, &meta) != nil || meta.Actor != "operator" || meta.MerchantID != a.merchantID {
		t.Fatalf("erasure events %+v (meta %+v)", erased, meta)
	}
	if _, err := cli(t, db, "customer", "forget", "--merchant", a.merchantID, "--customer", a.customerID); err != nil {
		t.Fatalf("forget again: %v", err)
	}
	if n := len(erasures()); n != 1 {
		t.Fatalf("%d erasure events after forgetting twice", n)
	}

	// The API serving since before holds the customer's key in its cache
	// (for keyring.CacheTTL) and their state in its engine: it reads the
	// erasure from the log and forgets both, with no rebuild or restart.
	personal := []string{"08031110001", "Adaeze", "Obiageli"}
	var after string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if after = get("/v1/customer/get/" + a.customerID); strings.Contains(after, `"[erased]"`) {
			break
		}
		if time.Now().After(deadline) { // well before the cached key expires
			t.Fatalf("the serving API still shows the forgotten customer: %s", after)
		}
	}
	for _, p := range personal {
		if strings.Contains(after, p) {
			t.Fatalf("after forget the customer still shows %q: %s", p, after)
		}
	}
	if !strings.Contains(after, `"[erased]"`) || !strings.Contains(after, a.customerID) {
		t.Fatalf("after: %s", after)
	}
	txAfter := history()
	if !strings.Contains(txAfter, `"[erased]"`) || !strings.Contains(txAfter, "wd-1") || strings.Count(txAfter, `"amount"`) != strings.Count(txBefore, `"amount"`) {
		t.Fatalf("transactions after forget:\n%s\nbefore:\n%s", txAfter, txBefore)
	}
	for _, p := range append(personal, accountOf(t, txBefore)) {
		if strings.Contains(txAfter, p) {
			t.Fatalf("transactions still show %q: %s", p, txAfter)
		}
	}

	exp, stderr, code := runEscrowd(t, db, "events", "export", "--merchant", a.merchantID)
	if code != 0 || !strings.Contains(exp, "[erased]") || !strings.Contains(exp, "wd-1") {
		t.Fatalf("export: exit %d\n%s%s", code, exp, stderr)
	}
	for _, p := range append(personal, accountOf(t, txBefore)) {
		if strings.Contains(exp, p) {
			t.Fatalf("export still holds %q: %s", p, exp)
		}
	}
	if out, stderr, code := runEscrowd(t, db, "audit", "--merchant", a.merchantID); code != 0 || !strings.Contains(out, "clean") {
		t.Fatalf("audit after forget: exit %d\n%s%s", code, out, stderr)
	}
	// A rebuild from the log shows the same.
	if _, err := cli(t, db, "projections", "rebuild"); err != nil {
		t.Fatal(err)
	}
	if again := get("/v1/customer/get/" + a.customerID); again != after {
		t.Fatalf("after a rebuild: %s; want %s", again, after)
	}
	// A forgotten customer's profile takes nothing new, and their email
	// and phone are free: the same person may be registered again.
	if code, r := call(t, base, "PUT", "/v1/customer/update/"+a.customerID, "", key, map[string]any{"firstname": "Grace"}); code != 400 ||
		r.Message != "This customer's personal data was erased" {
		t.Fatalf("update of a forgotten customer: %d %s", code, r.Message)
	}
	code, r := call(t, base, "POST", "/v1/customer/create", "", key, map[string]any{"firstname": "Adaeze", "lastname": "Obiageli",
		"email": "08031110001@x.co", "phone": "08031110001"})
	if code != 201 || strings.Contains(string(r.Data), a.customerID) {
		t.Fatalf("registering the forgotten customer's email and phone again: %d %s %s", code, r.Message, r.Data)
	}
	if code, r := call(t, base, "POST", "/v1/customer/create", "", key, map[string]any{"firstname": "Other", "lastname": "Person",
		"email": "08031110001@x.co", "phone": "08031119999"}); code != 400 || !strings.Contains(r.Message, "email already exists") {
		t.Fatalf("the new registration holds the email: %d %s", code, r.Message)
	}
	// The other merchant's customer keeps their data.
	if c, found, err := env.queries().CustomerByID(ctx, b.customerID); err != nil || !found || c.Email != "08031110002@x.co" {
		t.Fatalf("the other customer: %+v %v %v", c, found, err)
	}
}

// TestCustomerForgetReachesAProcessStartedMeanwhile: a process that
// starts after the erasure is recorded, and opens the customer's data
// before their key is destroyed, cannot learn of the erasure from the log
// (it reads from after it); it stops opening their data as soon as the key
// is destroyed all the same, not when a cached key would expire.
func TestCustomerForgetReachesAProcessStartedMeanwhile(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewURL(t)
	env := testEnv(t, db)
	var last eventstore.Position
	a := newShop(t, env, db, "Shop", "08031110001", &last)
	if err := projections.CatchUpTo(ctx, env.Store, env.Pool, nil, last, env.Projectors...); err != nil {
		t.Fatal(err)
	}
	key := createKeyProcess(t, db, a.merchantID, "test", "super_admin").Key
	t.Setenv("ESCROW_RATE_LIMIT_PER_MINUTE", "0") // the test polls
	var base, account string
	err := eraseCustomer(ctx, env, a.merchantID, a.customerID, func() {
		base = startAPI(t, db)
		account = accountOf(t, paymentHistory(t, base, key, a.customerID)) // opened with the key, still stored
	})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		h := paymentHistory(t, base, key, a.customerID)
		if !strings.Contains(h, account) && strings.Contains(h, `"[erased]"`) {
			break
		}
		if time.Now().After(deadline) { // well before a cached key expires
			t.Fatalf("the process started meanwhile still opens the forgotten customer's data: %s", h)
		}
	}
}

// paymentHistory is GET /v1/payment/history of customer id through base.
func paymentHistory(t *testing.T, base, key, id string) string {
	t.Helper()
	req, err := http.NewRequest("GET", base+"/v1/payment/history", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("customer-id", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("history: %d %s", resp.StatusCode, body)
	}
	return string(body)
}

// accountOf is the withdrawal's account number in a transactions listing.
func accountOf(t *testing.T, listing string) string {
	t.Helper()
	_, rest, ok := strings.Cut(listing, `"accountNumber":"`)
	if !ok {
		t.Fatalf("no account number in %s", listing)
	}
	n, _, _ := strings.Cut(rest, `"`)
	if len(n) != 10 {
		t.Fatalf("account number %q", n)
	}
	return n
}
