package httpapi

import (
	"fmt"
	"sync"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
)

func customerBody(email, phone string, extra ...any) map[string]any {
	b := map[string]any{"firstname": "Ada", "lastname": "Obi", "email": email, "phone": phone}
	for i := 0; i+1 < len(extra); i += 2 {
		b[extra[i].(string)] = extra[i+1]
	}
	return b
}

func TestCreateCustomer(t *testing.T) {
	h := newHarness(t)
	post := func(key string, body any) resp {
		return h.do(req{method: "POST", path: "/v1/customer/create", key: key, body: body})
	}
	r := post(h.sa(), customerBody("Ada@Example.com", "2348031234567", "bvn", "12345678901", "dob", "1990-05-01")).
		expect(t, 201, "Customer created successfully")
	c := r.obj()
	want := map[string]any{"firstname": "Ada", "lastname": "Obi", "email": "ada@example.com", "phone": "08031234567",
		"bvn": "*******8901", "dob": "1990-05-01", "status": "active", "countryId": "cty_ng", "environment": "test",
		"merchantId": h.m.MerchantID, "blockedReason": nil}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("%s = %v, want %v", k, c[k], v)
		}
	}
	if p := c["permissions"].(map[string]any); p["canBuy"] != true || p["canSell"] != true || p["canWithdraw"] != true {
		t.Errorf("permissions %v", p)
	}
	if ct := c["country"].(map[string]any); ct["isoCode"] != "NG" || ct["name"] != "Nigeria" {
		t.Errorf("country %v", ct)
	}
	for _, f := range []string{"customerId", "createdAt", "updatedAt"} {
		if s, _ := c[f].(string); s == "" {
			t.Errorf("%s missing", f)
		}
	}

	errorsCases := []struct {
		name   string
		key    string
		body   any
		status int
		msg    string
	}{
		{"duplicate email, other case", h.sa(), customerBody("ADA@example.com", "08099999999"), 400, "A customer with this email already exists"},
		{"duplicate phone, international spelling", h.sa(), customerBody("x@example.com", "23408031234567"), 400, "A customer with this phone number already exists"},
		{"invalid country", h.sa(), customerBody("y@example.com", "08011111111", "countryId", "Atlantis"), 400, "Invalid country selected"},
		{"phone with plus", h.sa(), customerBody("y@example.com", "+2348011111111"), 400, "Invalid phone number"},
		{"missing firstname", h.sa(), map[string]any{"lastname": "O", "email": "y@example.com", "phone": "08011111111"}, 400, "firstname is required"},
		{"bad bvn", h.sa(), customerBody("y@example.com", "08011111111", "bvn", "12"), 400, "bvn must be 11 digits"},
		{"wrong type", h.sa(), map[string]any{"firstname": 5}, 400, "firstname has the wrong type"},
		{"standard key", h.std(), customerBody("z@example.com", "08022222222"), 401, "Access denied"},
		{"malformed JSON", h.sa(), "{not json", 400, "Invalid JSON body"},
	}
	for _, c := range errorsCases {
		t.Run(c.name, func(t *testing.T) { post(c.key, c.body).expect(t, c.status, c.msg) })
	}
	h.do(req{method: "POST", path: "/v1/customer/create", key: h.sa(), cid: "x", body: customerBody("q@example.com", "08033333333")}).
		expect(t, 400, "customer-id is not allowed in request header")

	// A country by ISO code; the phone follows that country's dial code.
	gh := post(h.sa(), customerBody("kofi@example.com", "233241234567", "countryId", "GH")).expect(t, 201, "").obj()
	if gh["countryId"] != "cty_gh" || gh["phone"] != "0241234567" {
		t.Fatalf("ghana customer %v", gh)
	}
	// Tenancy: the same email is free in the live environment and for another merchant.
	h.do(req{method: "POST", path: "/v1/customer/create", key: key(h.m, domain.Live, merchant.SuperAdmin), host: liveHost,
		body: customerBody("ada@example.com", "08031234567")}).expect(t, 201, "")
	other := h.newMerchant(false)
	post(key(other, domain.Test, merchant.SuperAdmin), customerBody("ada@example.com", "08031234567")).expect(t, 201, "")
}

func TestConcurrentCreatesWithOneEmail(t *testing.T) {
	h := newHarness(t)
	const n = 12
	var wg sync.WaitGroup
	codes := make([]resp, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			codes[i] = h.do(req{method: "POST", path: "/v1/customer/create", key: h.sa(),
				body: customerBody("race@example.com", fmt.Sprintf("080400000%02d", i))})
		}(i)
	}
	wg.Wait()
	created := 0
	for _, r := range codes {
		switch {
		case r.Status == 201:
			created++
		case r.Status == 400 && r.Message == "A customer with this email already exists":
		default:
			t.Fatalf("unexpected %d %s", r.Status, r.Raw)
		}
	}
	if created != 1 {
		t.Fatalf("%d customers created with one email", created)
	}
	list := h.do(req{path: "/v1/customers?email=race@example.com", key: h.std()}).expect(t, 200, "")
	if rows := list.obj()["data"].([]any); len(rows) != 1 {
		t.Fatalf("rows %v", rows)
	}
}

func TestGetAndListCustomers(t *testing.T) {
	h := newHarness(t)
	var ids []string
	for i := 0; i < 12; i++ {
		ids = append(ids, h.createCustomer(h.sa(), fmt.Sprintf("c%02d@example.com", i), fmt.Sprintf("080500000%02d", i)))
	}
	got := h.do(req{path: "/v1/customer/get/" + ids[3], key: h.std()}).expect(t, 200, "Customer fetched successfully").obj()
	if got["customerId"] != ids[3] || got["email"] != "c03@example.com" {
		t.Fatalf("get %v", got)
	}
	h.do(req{path: "/v1/customer/get/unknown", key: h.std()}).expect(t, 400, "Customer not found")
	other := h.newMerchant(false)
	h.do(req{path: "/v1/customer/get/" + ids[3], key: key(other, domain.Test, merchant.Standard)}).expect(t, 400, "Customer not found")
	h.do(req{path: "/v1/customer/get/" + ids[3], key: h.std(), cid: ids[3]}).expect(t, 400, "customer-id is not allowed in request header")

	page := func(q string) (rows []any, pg map[string]any) {
		r := h.do(req{path: "/v1/customers" + q, key: h.std()}).expect(t, 200, "Customers fetched successfully").obj()
		return r["data"].([]any), r["pagination"].(map[string]any)
	}
	rows, pg := page("?page=1&limit=5")
	if len(rows) != 5 || pg["count"] != 12.0 || pg["pages"] != 3.0 || pg["isLastPage"] != false || pg["nextPage"] != 2.0 || pg["previousPage"] != nil {
		t.Fatalf("page 1: %d rows, %v", len(rows), pg)
	}
	if rows[0].(map[string]any)["customerId"] != ids[11] {
		t.Fatal("newest first")
	}
	rows, pg = page("?page=3&limit=5")
	if len(rows) != 2 || pg["isLastPage"] != true || pg["nextPage"] != nil || pg["previousPage"] != 2.0 {
		t.Fatalf("page 3: %d rows, %v", len(rows), pg)
	}
	// Every record exactly once across the pages.
	seen := map[string]bool{}
	for p := 1; p <= 3; p++ {
		rows, _ := page(fmt.Sprintf("?page=%d&limit=5", p))
		for _, r := range rows {
			seen[r.(map[string]any)["customerId"].(string)] = true
		}
	}
	if len(seen) != 12 {
		t.Fatalf("pages covered %d customers", len(seen))
	}
	if rows, _ = page(""); len(rows) != 10 {
		t.Fatalf("default limit: %d", len(rows))
	}
	if rows, pg = page("?limit=500"); len(rows) != 12 || pg["pages"] != 1.0 {
		t.Fatalf("ceiling: %d rows %v", len(rows), pg)
	}
	if rows, _ = page("?limit=abc&page=-3"); len(rows) != 10 {
		t.Fatalf("fallback: %d", len(rows))
	}
	if rows, _ = page("?limit=0"); len(rows) != 10 {
		t.Fatalf("zero limit falls back to 10: %d", len(rows))
	}
	// The ceiling on /v1/customers is 50.
	for i := 12; i < 55; i++ {
		h.createCustomer(h.sa(), fmt.Sprintf("c%02d@example.com", i), fmt.Sprintf("080500000%02d", i))
	}
	if rows, pg = page("?limit=100"); len(rows) != 50 || pg["pages"] != 2.0 {
		t.Fatalf("ceiling 50: %d rows %v", len(rows), pg)
	}
	// Tenant isolation: the other merchant sees none of them.
	r := h.do(req{path: "/v1/customers", key: key(other, domain.Test, merchant.Standard)}).expect(t, 200, "").obj()
	if len(r["data"].([]any)) != 0 {
		t.Fatal("other merchant sees customers")
	}
}

func TestCustomerLookups(t *testing.T) {
	h := newHarness(t)
	id := h.createCustomer(h.sa(), "Ada@Example.com", "08031234567")
	h.createCustomer(h.sa(), "bob@example.com", "08031234568")
	lookup := func(q string) resp { return h.do(req{path: "/v1/customers?" + q, key: h.std()}) }
	for _, q := range []string{"email=ADA@example.com", "phone=08031234567", "phone=2348031234567", "phone=23408031234567",
		"email=ada@example.com&phone=2348031234567", "email=ada@example.com&page=9&limit=1"} {
		r := lookup(q).expect(t, 200, "Customers fetched successfully").obj()
		rows := r["data"].([]any)
		pg := r["pagination"].(map[string]any)
		if len(rows) != 1 || rows[0].(map[string]any)["customerId"] != id || pg["count"] != 1.0 || pg["pages"] != 1.0 || pg["isLastPage"] != true {
			t.Fatalf("%s: %v", q, r)
		}
	}
	lookup("email=none@example.com").expect(t, 400, "No customer found with the provided email")
	lookup("phone=08000000000").expect(t, 400, "No customer found with the provided phone")
	lookup("email=ada@example.com&phone=08031234568").expect(t, 400, "No customer found with the provided email and phone")

	for _, p := range []string{"08031234567", "2348031234567", "23408031234567"} {
		got := h.do(req{path: "/v1/payment/verify-phone/" + p, key: h.std()}).expect(t, 200, "").obj()
		if got["customerId"] != id {
			t.Fatalf("verify-phone %s: %v", p, got)
		}
	}
	h.do(req{path: "/v1/payment/verify-phone/08000000000", key: h.std()}).expect(t, 400, "No customer found with the provided phone")
	// Another merchant cannot find it.
	other := h.newMerchant(false)
	h.do(req{path: "/v1/payment/verify-phone/08031234567", key: key(other, domain.Test, merchant.Standard)}).
		expect(t, 400, "No customer found with the provided phone")
}

func TestUpdateCustomer(t *testing.T) {
	h := newHarness(t)
	id := h.createCustomer(h.sa(), "ada@example.com", "08031234567")
	bob := h.createCustomer(h.sa(), "bob@example.com", "08031234568")
	put := func(k, cust string, body any) resp {
		return h.do(req{method: "PUT", path: "/v1/customer/update/" + cust, key: k, body: body})
	}
	got := put(h.sa(), id, map[string]any{"firstname": "Adaeze", "email": "Adaeze@Example.com"}).
		expect(t, 200, "Customer updated successfully").obj()
	if got["firstname"] != "Adaeze" || got["lastname"] != "Obi" || got["email"] != "adaeze@example.com" || got["phone"] != "08031234567" {
		t.Fatalf("updated %v", got)
	}
	// The old email is released: another customer may take it.
	put(h.sa(), bob, map[string]any{"email": "ada@example.com"}).expect(t, 200, "")
	put(h.sa(), bob, map[string]any{"email": "ADAEZE@example.com"}).expect(t, 400, "A customer with this email already exists")
	put(h.sa(), id, map[string]any{}).expect(t, 400, "Provide at least one of firstname, lastname or email")
	put(h.sa(), id, map[string]any{"phone": "08000000000"}).expect(t, 400, "phone and bvn cannot be changed")
	put(h.sa(), id, map[string]any{"email": "nope"}).expect(t, 400, "email must be a valid email address")
	put(h.std(), id, map[string]any{"firstname": "X"}).expect(t, 401, "Access denied")
	other := h.newMerchant(false)
	put(key(other, domain.Test, merchant.SuperAdmin), id, map[string]any{"firstname": "X"}).expect(t, 401, "Access denied")
	// Permissions and block state show in the record.
	p := h.do(req{method: "PUT", path: "/v1/customer/permissions/" + id, key: h.sa(), body: map[string]any{"canSell": false}}).expect(t, 200, "").obj()
	if perms := p["permissions"].(map[string]any); perms["canSell"] != false || perms["canBuy"] != true {
		t.Fatalf("permissions %v", perms)
	}
	h.do(req{method: "PUT", path: "/v1/customer/permissions/" + id, key: h.sa(), body: map[string]any{}}).
		expect(t, 400, "Provide at least one of canBuy, canSell or canWithdraw")
	b := h.do(req{method: "PUT", path: "/v1/customer/block/" + id, key: h.sa(), body: map[string]any{"reason": "fraud"}}).expect(t, 200, "").obj()
	if b["status"] != "blocked" || b["blockedReason"] != "fraud" || b["blockedAt"] == nil {
		t.Fatalf("blocked %v", b)
	}
	h.do(req{method: "PUT", path: "/v1/customer/block/unknown", key: h.sa()}).expect(t, 400, "Customer not found")
	u := h.do(req{method: "PUT", path: "/v1/customer/unblock/" + id, key: h.sa()}).expect(t, 200, "").obj()
	if u["status"] != "active" || u["blockedReason"] != nil {
		t.Fatalf("unblocked %v", u)
	}
}

func TestReferenceData(t *testing.T) {
	h := newHarness(t)
	cs := h.do(req{path: "/v1/countries", key: h.std()}).expect(t, 200, "").Data.([]any)
	iso := map[string]bool{}
	for _, c := range cs {
		iso[c.(map[string]any)["isoCode"].(string)] = true
	}
	for _, want := range []string{"NG", "GH", "KE", "ZA", "GB", "US"} {
		if !iso[want] {
			t.Errorf("country %s missing", want)
		}
	}
	banks := h.do(req{path: "/v1/payment/bank-list", key: h.std()}).expect(t, 200, "").Data.([]any)
	if len(banks) < 20 {
		t.Fatalf("%d banks", len(banks))
	}
}

func TestIdempotentCustomerCreate(t *testing.T) {
	h := newHarness(t)
	r1 := h.do(req{method: "POST", path: "/v1/customer/create", key: h.sa(), body: customerBody("i@example.com", "08031230000"),
		headers: map[string]string{"Idempotency-Key": "abc-1"}}).expect(t, 201, "")
	r2 := h.do(req{method: "POST", path: "/v1/customer/create", key: h.sa(), body: customerBody("i@example.com", "08031230000"),
		headers: map[string]string{"Idempotency-Key": "abc-1"}})
	if r2.Status != 201 || string(r2.Raw) != string(r1.Raw) || r2.Header.Get("Idempotency-Replayed") != "true" {
		t.Fatalf("replay %d %s (%q)", r2.Status, r2.Raw, r2.Header.Get("Idempotency-Replayed"))
	}
	h.do(req{method: "POST", path: "/v1/customer/create", key: h.sa(), body: customerBody("j@example.com", "08031230001"),
		headers: map[string]string{"Idempotency-Key": "abc-1"}}).expect(t, 409, "Idempotency key reused with a different request")
}
