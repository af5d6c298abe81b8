package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/escrowd/escrowd/internal/pgtest"
)

// TestAnOpenTransactionElsewhereStallsNothing: another application's
// transaction, open in another database of the same server for 25 s, holds
// no part of escrowd back. While it stays open a merchant is created by
// the command line (which waits for its read models), a customer through
// the API, the customer tops up and reads the history, and the audit
// replays every one of the merchant's events: all of it is done before the
// transaction ends.
func TestAnOpenTransactionElsewhereStallsNothing(t *testing.T) {
	t.Setenv("ESCROW_RATE_LIMIT_PER_MINUTE", "0")
	db := pgtest.NewURL(t)
	_, end := pgtest.OpenTransactionElsewhere(t)
	held := time.AfterFunc(25*time.Second, end)
	defer held.Stop()

	m := createMerchantProcess(t, db, "--name", "Held Elsewhere")
	var key string
	for _, k := range m.Keys {
		if k.Environment == "test" && k.Role == "super_admin" {
			key = k.Key
		}
	}
	base := startAPI(t, db)
	do := func(method, path, cid string, body any) apiReply {
		t.Helper()
		b, _ := json.Marshal(body)
		req, err := http.NewRequest(method, base+path, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		if cid != "" {
			req.Header.Set("customer-id", cid)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r apiReply
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %d %+v %v", method, path, resp.StatusCode, r, err)
		}
		return r
	}
	created := do(http.MethodPost, "/v1/customer/create", "", map[string]any{
		"firstname": "Ada", "lastname": "Obi", "email": "ada@example.com", "phone": "08031234567"})
	var c struct {
		CustomerID string `json:"customerId"`
	}
	if err := json.Unmarshal(created.Data, &c); err != nil || c.CustomerID == "" {
		t.Fatalf("customer create: %s %v", created.Data, err)
	}
	do(http.MethodPost, "/v1/payment/topup", c.CustomerID, map[string]any{"amount": 2500})
	history := do(http.MethodGet, "/v1/payment/history", c.CustomerID, nil)
	var page struct {
		Data []struct {
			Amount json.Number `json:"amount"`
		} `json:"data"`
	}
	if err := json.Unmarshal(history.Data, &page); err != nil || len(page.Data) != 1 || page.Data[0].Amount != "2500" {
		t.Fatalf("history right after the top-up: %s %v", history.Data, err)
	}

	out, stderr, code := runEscrowd(t, db, "audit", "--merchant", m.MerchantID, "--json")
	if code != 0 {
		t.Fatalf("audit exited %d: %s %s", code, out, stderr)
	}
	var rep struct {
		Events      int64             `json:"events"`
		Differences []json.RawMessage `json:"differences"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("audit printed %q: %v", out, err)
	}
	env := testEnv(t, db)
	// The merchant's events of its environments (the merchant's own
	// stream carries none): the audit trail the audit replays.
	var events int64
	if err := env.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM es_events WHERE metadata ->> 'merchantId' = $1 AND metadata ->> 'environment' IS NOT NULL`, m.MerchantID).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if rep.Events != events || events < 3 || len(rep.Differences) != 0 {
		t.Fatalf("audit replayed %d of the merchant's %d events, differences %s", rep.Events, events, rep.Differences)
	}
	// All of it ran while the transaction was open: had anything waited
	// for it, the timer would have ended it first.
	if !held.Stop() {
		t.Fatal("the flow finished only after the transaction elsewhere ended: something waited for it")
	}
	end()
}
