package httpapi

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/internal/dashauth"
	"github.com/escrowd/escrowd/internal/keyring"
	"github.com/escrowd/escrowd/projections"
)

// TestDatabaseHoldsNoPersonalDataInPlain: after a workload of customers
// with names, emails, phones, BVNs and dates of birth, bank withdrawals to
// account numbers, webhook deliveries to a merchant's endpoint, requests
// with Idempotency-Keys, whitelisted crypto addresses, a dispute and a
// dashboard user, no column of any table of the database (read models,
// outbox, idempotency records, dashboard users, the log, everything the
// public schema holds), dumped as text (bytea as its bytes), holds one of
// those values or a signing secret, while the API and the webhooks still
// carry them; nor after a rebuild of the read models.
func TestDatabaseHoldsNoPersonalDataInPlain(t *testing.T) {
	h := newWebhookHarness(t)
	rc := newHookReceiver(t, h.m.SigningSecrets[domain.Test], 0)
	h.do(req{method: "PUT", path: "/v1/merchant/webhook", key: h.sa(), body: map[string]any{"url": rc.srv.URL + "/hooks"}}).
		expect(t, 200, "Webhook updated successfully")
	h.newDashUser(h.m.MerchantID, "staff.login@example.com", dashauth.Viewer)
	secrets := []string{h.m.SigningSecrets[domain.Test], h.m.SigningSecrets[domain.Live], "staff.login"}
	var customers []string
	for i := range 3 {
		first, last := []string{"Ngozika", "Obiageli", "Chinwendu"}[i], []string{"Adeyemiola", "Okonkwoeze", "Nwachukwuu"}[i]
		email, phone := fmt.Sprintf("ngozi.private%d@example.com", i), fmt.Sprintf("0803777000%d", i)
		bvn, dob := fmt.Sprintf("2221234567%d", i), fmt.Sprintf("1991-02-0%d", i+1)
		idem := map[string]string{"Idempotency-Key": fmt.Sprintf("create-%d", i)}
		body := map[string]any{"firstname": first, "lastname": last, "email": email, "phone": phone, "bvn": bvn, "dob": dob}
		r := h.do(req{method: "POST", path: "/v1/customer/create", key: h.sa(), body: body, headers: idem})
		r.expect(t, 201, "Customer created successfully")
		cid := r.obj()["customerId"].(string)
		// The replay is served from the cached answer, which holds the
		// customer's data.
		again := h.do(req{method: "POST", path: "/v1/customer/create", key: h.sa(), body: body, headers: idem}).expect(t, 201, "Customer created successfully")
		if again.obj()["email"] != email || again.obj()["customerId"] != cid {
			t.Fatalf("the replay answers %s", again.Raw)
		}
		h.topUp(cid, 5000).expect(t, 200, "Wallet topped up successfully")
		account := nuban(t, "058", fmt.Sprintf("7%d", i), false)
		wd := req{method: "POST", path: "/v1/payment/create-intent", key: h.std(), cid: cid,
			body: bankWithdrawal(fmt.Sprintf("wd-%d", i), 1500, account), headers: map[string]string{"Idempotency-Key": fmt.Sprintf("wd-%d", i)}}
		h.do(wd).expect(t, 201, "Payment intent created successfully")
		replayed := h.do(wd).expect(t, 201, "Payment intent created successfully")
		details, _ := replayed.obj()["withdrawalDetails"].(map[string]any)
		accountName, _ := details["accountName"].(string)
		if details["accountNumber"] != account || accountName == "" {
			t.Fatalf("the replayed intent does not name the account: %s", replayed.Raw)
		}
		h.verify(cid, fmt.Sprintf("wd-%d", i)).expect(t, 200, "")
		address, label := bscAddr(700+i), fmt.Sprintf("Mama Ngozika wallet %d", i)
		h.do(req{method: "POST", path: "/v1/whitelist-address", key: h.std(), cid: cid,
			body: whitelistBody(address, "label", label)}).expect(t, 201, "")
		if list := string(h.do(req{path: "/v1/whitelist-address", key: h.std(), cid: cid}).expect(t, 200, "").Raw); !strings.Contains(list, address) || !strings.Contains(list, label) {
			t.Fatalf("the whitelist answers %s", list)
		}
		got := h.do(req{method: "GET", path: "/v1/customer/get/" + cid, key: h.sa()}).expect(t, 200, "").obj()
		if got["email"] != email || got["firstname"] != first || got["phone"] != phone {
			t.Fatalf("the API answers %v", got)
		}
		list := h.do(req{path: "/v1/customers?email=" + email, key: h.std()}).expect(t, 200, "Customers fetched successfully").obj()["data"].([]any)
		if len(list) != 1 || list[0].(map[string]any)["lastname"] != last {
			t.Fatalf("by email: %v", list)
		}
		secrets = append(secrets, first, last, email, phone[1:], bvn, dob, account, accountName, address, label)
		customers = append(customers, cid)
	}
	// A dispute: the buyer's and the merchant's entries name them and say
	// what they wrote.
	buyer, seller := customers[0], customers[1]
	e := h.createEscrow(seller, map[string]string{"amount": "3000", "purpose": "Phone", "whoPays": "seller",
		"maxDelivery": "1", "deliveryTimeline": "minutes"}, 0).expect(t, 201, "").obj()
	h.pay(buyer, "pay-dispute", 3000, e["id"]).expect(t, 200, "Payment successful")
	complaint, ruling := "Ngozika never got the Tecno phone from Obiageli", "Refund Ngozika in full, the parcel was lost"
	// The seller's reply merely looks sealed: it is kept sealed, as any.
	reply := domain.SealedPrefix + "Obiageli sent it by courier"
	h.submitDispute(e["paymentToken"].(string), buyer, complaint).expect(t, 200, "Escrow dispute submitted successfully")
	h.submitDispute(e["paymentToken"].(string), seller, reply).expect(t, 200, "Escrow dispute submitted successfully")
	h.resolveDispute(e["id"].(string), map[string]any{"status": "REFUNDED", "resolution": ruling}).expect(t, 200, "Dispute resolved successfully")
	disputesShown := func(when string) {
		t.Helper()
		shown := string(h.do(req{path: "/v1/escrow/all-dispute", key: h.std()}).expect(t, 200, "").Raw) +
			string(h.do(req{path: "/v1/escrow/dispute/get/" + e["id"].(string), key: h.std(), cid: buyer}).expect(t, 200, "").Raw)
		for _, s := range []string{complaint, reply, ruling, "Ngozika Adeyemiola", "Obiageli Okonkwoeze"} {
			if !strings.Contains(shown, s) {
				t.Fatalf("%s: the disputes answer without %q: %s", when, s, shown)
			}
		}
	}
	disputesShown("as projected")
	secrets = append(secrets, complaint, ruling, "Obiageli sent it by courier")
	h.caughtUp()
	hits := rc.waitFor(t, h, 1)
	var sent strings.Builder
	for _, hit := range hits {
		if !hit.SigOK {
			t.Errorf("webhook %s %s: the signature does not verify", hit.Event, hit.ID)
		}
		fmt.Fprintf(&sent, "%v\n", hit.Data)
	}
	if !strings.Contains(sent.String(), nuban(t, "058", "70", false)) {
		t.Fatalf("no webhook names the account paid out to: %s", sent.String())
	}

	holdsNone := func(when string) {
		t.Helper()
		dump, sealed := dumpDatabase(t, h)
		if !sealed {
			t.Fatal("nothing sealed in the database?")
		}
		for table, text := range dump {
			low := strings.ToLower(text)
			for _, s := range secrets {
				if i := strings.Index(low, strings.ToLower(s)); i >= 0 {
					t.Errorf("%s: %s holds %q: …%s…", when, table, s, text[max(0, i-150):min(len(text), i+60)])
				}
			}
		}
	}
	holdsNone("as projected")

	// A rebuild keeps them sealed as well.
	h.projecting.stop()
	if err := projections.RebuildAll(context.Background(), h.pool, h.store, projections.All(wired.Sealer(h.store)), nil, nil); err != nil {
		t.Fatal(err)
	}
	h.projecting.start()
	disputesShown("after a rebuild")
	holdsNone("after a rebuild")
}

// dumpDatabase is every column of every table of the public schema as
// text, by "table.column" (bytea columns as their bytes, non-printable
// ones escaped); sealed reports whether some value was sealed.
func dumpDatabase(t *testing.T, h *harness) (map[string]string, bool) {
	t.Helper()
	ctx := context.Background()
	rows, err := h.pool.Query(ctx, `SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c
		JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
		WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE' ORDER BY 1, c.ordinal_position`)
	if err != nil {
		t.Fatal(err)
	}
	type column struct{ table, name, typ string }
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		return c, r.Scan(&c.table, &c.name, &c.typ)
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	sealed := false
	tables := map[string]bool{}
	for _, c := range cols {
		tables[c.table] = true
		name := c.table + "." + c.name
		expr := pgx.Identifier{c.name}.Sanitize() + "::text"
		if c.typ == "bytea" {
			expr = "encode(" + pgx.Identifier{c.name}.Sanitize() + ", 'escape')"
		}
		var text *string
		if err := h.pool.QueryRow(ctx, `SELECT string_agg(`+expr+`, E'\n') FROM `+pgx.Identifier{c.table}.Sanitize()).Scan(&text); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if text != nil {
			out[name] = *text
			sealed = sealed || strings.Contains(*text, "escrowd-sealed:v1:")
		}
	}
	for _, must := range []string{"rm_customers", "webhook_deliveries", "http_idempotency_keys", "es_events"} {
		if !tables[must] {
			t.Fatalf("no table %s in the dump: %v", must, tables)
		}
	}
	return out, sealed
}

// TestForgottenCustomerReadsErasedAtOnce: once a customer's data key is
// destroyed (what `escrowd customer forget` does), the API answers
// "[erased]" for their personal fields at once, from the read models as
// they are, and so after a rebuild; another customer is untouched.
func TestForgottenCustomerReadsErasedAtOnce(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	body := map[string]any{"firstname": "Ngozika", "lastname": "Adeyemiola", "email": "forget.me@example.com", "phone": "08037770011",
		"bvn": "22212345679", "dob": "1991-02-09"}
	create := req{method: "POST", path: "/v1/customer/create", key: h.sa(), body: body, headers: map[string]string{"Idempotency-Key": "create-forget"}}
	cid := h.do(create).expect(t, 201, "Customer created successfully").obj()["customerId"].(string)
	other := h.createCustomer(h.sa(), "keep.me@example.com", "08037770012")
	h.topUp(cid, 5000).expect(t, 200, "Wallet topped up successfully")
	account := nuban(t, "058", "79", false)
	withdraw := req{method: "POST", path: "/v1/payment/create-intent", key: h.std(), cid: cid,
		body: bankWithdrawal("wd-forget", 1500, account), headers: map[string]string{"Idempotency-Key": "wd-forget"}}
	h.do(withdraw).expect(t, 201, "Payment intent created successfully")
	keep := req{method: "PUT", path: "/v1/customer/update/" + other, key: h.sa(), body: map[string]any{"lastname": "Obieze"},
		headers: map[string]string{"Idempotency-Key": "update-kept"}}
	h.do(keep).expect(t, 200, "")
	h.do(create).expect(t, 201, "Customer created successfully")
	h.do(withdraw).expect(t, 201, "Payment intent created successfully")
	h.verify(cid, "wd-forget").expect(t, 200, "")
	h.caughtUp()
	history := func() string {
		t.Helper()
		return string(h.do(req{path: "/v1/payment/history", key: h.std(), cid: cid}).expect(t, 200, "").Raw)
	}
	if before := history(); !strings.Contains(before, account) {
		t.Fatalf("history before: %s", before)
	}
	if got := h.do(req{path: "/v1/customer/get/" + cid, key: h.sa()}).expect(t, 200, "").obj(); got["email"] != "forget.me@example.com" || got["bvn"] != "*******5679" {
		t.Fatalf("before: %v", got)
	}
	if _, err := h.keys.Destroy(ctx, keyring.Customer(cid)); err != nil {
		t.Fatal(err)
	}
	expectErased := func(when string) {
		t.Helper()
		got := h.do(req{path: "/v1/customer/get/" + cid, key: h.sa()}).expect(t, 200, "").obj()
		for _, f := range []string{"firstname", "lastname", "email", "phone", "bvn", "dob"} {
			if got[f] != domain.Erased {
				t.Errorf("%s: %s is %v", when, f, got[f])
			}
		}
		list := h.do(req{path: "/v1/customers", key: h.std()}).expect(t, 200, "Customers fetched successfully").obj()["data"].([]any)
		seen := 0
		for _, c := range list {
			c := c.(map[string]any)
			switch c["customerId"] {
			case cid:
				seen++
				if c["email"] != domain.Erased || c["firstname"] != domain.Erased {
					t.Errorf("%s: the listing shows %v", when, c)
				}
			case other:
				seen++
				if c["email"] != "keep.me@example.com" || c["firstname"] != "Ada" {
					t.Errorf("%s: the other customer is %v", when, c)
				}
			}
		}
		if seen != 2 {
			t.Errorf("%s: the listing has %d of the 2 customers: %v", when, seen, list)
		}
		// The money records stay, their account erased.
		if hist := history(); strings.Contains(hist, account) || !strings.Contains(hist, `"accountNumber":"[erased]"`) || !strings.Contains(hist, "wd-forget") {
			t.Errorf("%s: history %s", when, hist)
		}
	}
	expectErased("with the key destroyed")
	// The answers kept for the forgotten customer's requests were sealed
	// with their key: a retry is told so, and the other customer's still
	// replays.
	for _, r := range []req{create, withdraw} {
		h.do(r).expect(t, 410, "The response kept for this idempotency key was erased with the customer's personal data; read the resource to see the outcome")
	}
	if again := h.do(keep).expect(t, 200, ""); again.Header.Get("Idempotency-Replayed") != "true" {
		t.Fatalf("the other customer's request was not replayed: %v", again.Header)
	}
	// Their money still moves after the erasure; its answer cannot be
	// kept, and a retry is told so at once.
	later := req{method: "POST", path: "/v1/payment/create-intent", key: h.std(), cid: cid,
		body: bankWithdrawal("wd-after-forget", 100, account), headers: map[string]string{"Idempotency-Key": "wd-after-forget"}}
	h.do(later).expect(t, 201, "Payment intent created successfully")
	h.do(later).expect(t, 410, "The response kept for this idempotency key was erased with the customer's personal data; read the resource to see the outcome")

	h.projecting.stop()
	if err := projections.RebuildAll(ctx, h.pool, h.store, projections.All(wired.Sealer(h.store)), nil, nil); err != nil {
		t.Fatal(err)
	}
	h.projecting.start()
	expectErased("after a rebuild")
}
