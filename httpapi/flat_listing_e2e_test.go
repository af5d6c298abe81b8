package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestFlatListingsReturnEveryRow: a flat listing (fromDate, toDate or
// reference given) returns every matching record, newest first, in one
// answer streamed as it is read: none cut at a row count.
func TestFlatListingsReturnEveryRow(t *testing.T) {
	h := newHarness(t)
	h.caughtUp()
	const n = 2345 // several read batches, and past any old cut-off
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if _, err := h.pool.Exec(context.Background(), `INSERT INTO rm_transactions
		(id, merchant_id, environment, customer_id, reference, transaction_type, status, record, created_at, pos)
		SELECT 'flat-' || i, $1, 'test', NULL, 'flat-' || i, 'deposit', 'success',
		       json_build_object('id', 'flat-' || i, 'reference', 'flat-' || i), $2, 1000000 + i
		FROM generate_series(1, $3) AS i`, h.m.MerchantID, at, n); err != nil {
		t.Fatal(err)
	}
	hr, err := http.NewRequest("GET", h.srv.URL+"/v1/merchant/transactions?fromDate=2026-03-01&toDate=2026-03-01", nil)
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Authorization", "Bearer "+h.sa())
	res, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var env struct {
		Status  int
		Message string
		Data    []map[string]any
	}
	if err := json.NewDecoder(res.Body).Decode(&env); err != nil || res.StatusCode != 200 || env.Status != 200 {
		t.Fatalf("%d %v: %+v", res.StatusCode, err, env.Message)
	}
	if env.Message == "" {
		t.Fatal("no message in the envelope")
	}
	if len(env.Data) != n {
		t.Fatalf("%d records, want %d", len(env.Data), n)
	}
	for i, rec := range env.Data {
		if want := fmt.Sprintf("flat-%d", n-i); rec["reference"] != want {
			t.Fatalf("record %d is %v, want %s (newest first)", i, rec["reference"], want)
		}
	}
	// A day without records is an empty array, not an error.
	empty := h.do(req{path: "/v1/merchant/transactions?fromDate=2026-03-02&toDate=2026-03-02", key: h.sa()}).expect(t, 200, "")
	if d, ok := empty.Data.([]any); !ok || len(d) != 0 {
		t.Fatalf("empty day: %s", empty.Raw)
	}
}
