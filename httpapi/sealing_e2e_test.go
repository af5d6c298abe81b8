package httpapi

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore"
)

// TestLogHoldsNoSecretsOrPersonalData: after a workload of merchants with
// signing secrets, customers with names, emails, phones, BVNs and dates of
// birth, and payouts to bank accounts, the stored log (es_events as
// PostgreSQL keeps it; the KurrentDB double's log as the client reads it)
// holds none of those values, in event data, metadata or stream names,
// while the API still answers them.
func TestLogHoldsNoSecretsOrPersonalData(t *testing.T) {
	t.Run("postgres", testLogHoldsNoSecrets)
	t.Run("kurrent", func(t *testing.T) { runOnKurrent(t, testLogHoldsNoSecrets) })
}

func testLogHoldsNoSecrets(t *testing.T) {
	h := newHarness(t)
	other := h.newMerchant(false)
	secrets := []string{h.m.SigningSecrets[domain.Test], h.m.SigningSecrets[domain.Live],
		other.SigningSecrets[domain.Test], other.SigningSecrets[domain.Live]}
	for i := range 3 {
		first, last := []string{"Ngozika", "Obiageli", "Chinwendu"}[i], []string{"Adeyemiola", "Okonkwoeze", "Nwachukwuu"}[i]
		email, phone := fmt.Sprintf("ngozi.private%d@example.com", i), fmt.Sprintf("0803777000%d", i)
		bvn, dob := fmt.Sprintf("2221234567%d", i), fmt.Sprintf("1991-02-0%d", i+1)
		r := h.do(req{method: "POST", path: "/v1/customer/create", key: h.sa(),
			body: map[string]any{"firstname": first, "lastname": last, "email": email, "phone": phone, "bvn": bvn, "dob": dob}})
		r.expect(t, 201, "Customer created successfully")
		cid := r.obj()["customerId"].(string)
		h.topUp(cid, 5000).expect(t, 200, "Wallet topped up successfully")
		account := nuban(t, "058", fmt.Sprintf("7%d", i), false)
		h.intent(cid, bankWithdrawal(fmt.Sprintf("wd-%d", i), 1500, account)).expect(t, 201, "Payment intent created successfully")
		h.verify(cid, fmt.Sprintf("wd-%d", i)).expect(t, 200, "")
		got := h.do(req{method: "GET", path: "/v1/customer/get/" + cid, key: h.sa()}).expect(t, 200, "").obj()
		if got["email"] != email || got["firstname"] != first {
			t.Fatalf("the API answers %v", got)
		}
		secrets = append(secrets, first, last, email, phone, bvn, dob, account)
	}
	h.caughtUp()

	log, n := storedLog(t, h)
	if !usesKurrent(t) {
		// PostgreSQL's own bytes, beside what the adapter reads.
		var rows string
		if err := h.pool.QueryRow(context.Background(), `SELECT string_agg(stream_id || ' ' || data::text || ' ' || coalesce(metadata::text, ''), E'\n') FROM es_events`).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		log.WriteString(rows)
	}
	if n < 20 || !strings.Contains(log.String(), `"escrowd-sealed:v1:`) {
		t.Fatalf("%d events read, none sealed?", n)
	}
	for _, s := range secrets {
		if i := strings.Index(log.String(), s); i >= 0 {
			t.Errorf("the log holds %q: …%s…", s, log.String()[max(0, i-200):min(log.Len(), i+50)])
		}
	}
}

// TestCustomerLookupsGoThroughTheBlindIndex: finding a customer by email
// or phone reads their reservations (named by blind index), not the read
// model's columns: with those columns changed behind the service's back,
// the customer is still found by their own email and phone, and not by
// the changed values.
func TestCustomerLookupsGoThroughTheBlindIndex(t *testing.T) {
	h := newHarness(t)
	cid := h.createCustomer(h.sa(), "lookup.me@example.com", "08036660001")
	h.caughtUp()
	if _, err := h.pool.Exec(context.Background(), `UPDATE rm_customers SET email = 'other@example.com', phone = '08036660009' WHERE customer_id = $1`, cid); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/customers?email=lookup.me@example.com", "/v1/customers?phone=08036660001",
		"/v1/customers?email=lookup.me@example.com&phone=08036660001"} {
		list := h.do(req{path: path, key: h.std()}).expect(t, 200, "Customers fetched successfully").obj()["data"].([]any)
		if len(list) != 1 || list[0].(map[string]any)["customerId"] != cid {
			t.Fatalf("%s: %v", path, list)
		}
	}
	if got := h.do(req{path: "/v1/payment/verify-phone/08036660001", key: h.std()}).expect(t, 200, "Customer fetched successfully").obj(); got["customerId"] != cid {
		t.Fatalf("verify-phone: %v", got)
	}
	h.do(req{path: "/v1/customers?email=other@example.com", key: h.std()}).expect(t, 400, "No customer found with the provided email")
	h.do(req{path: "/v1/payment/verify-phone/08036660009", key: h.std()}).expect(t, 400, "No customer found with the provided phone")
	h.do(req{path: "/v1/customers?email=lookup.me@example.com&phone=08036660009", key: h.std()}).expect(t, 400, "No customer found with the provided email and phone")
}

// storedLog is the whole log as the store under the codec keeps it (each
// event's stream, data and metadata), and how many events it holds.
func storedLog(t *testing.T, h *harness) (*strings.Builder, int) {
	t.Helper()
	var log strings.Builder
	n := 0
	raw := underCodec(h.store)
	for after := eventstore.Start; ; {
		events, err := raw.ReadAll(context.Background(), after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(events) == 0 {
			return &log, n
		}
		for _, e := range events {
			fmt.Fprintf(&log, "%s\n%s\n%s\n", e.Stream, e.Data, e.Metadata)
			n++
		}
		after = events[len(events)-1].Position
	}
}
