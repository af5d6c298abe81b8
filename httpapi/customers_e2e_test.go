package httpapi

import (
	"context"
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
		{"duplicate email, other case", h.sa(), customerBody("ADA@example.com", "08099999999"), 400, "A customer with this email already exists under this merchant"},
		{"duplicate phone, international spelling", h.sa(), customerBody("x@example.com", "23408031234567"), 400, "A customer with this phone already exists under this merchant"},
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
		case r.Status == 400 && r.Message == "A customer with this email already exists under this merchant":
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
		got := h.do(req{path: "/v1/payment/verify-phone/" + p, key: h.std()}).expect(t, 200, "Customer fetched successfully").obj()
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
	put(h.sa(), bob, map[string]any{"email": "ADAEZE@example.com"}).expect(t, 400, "A customer with this email already exists under this merchant")
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
	cs := h.do(req{path: "/v1/countries", key: h.std()}).expect(t, 200, "Countries fetched successfully").Data.([]any)
	byISO := map[string]map[string]any{}
	ids := map[string]bool{}
	for _, raw := range cs {
		c := raw.(map[string]any)
		if len(c) != 6 {
			t.Errorf("country fields %v, want exactly id, name, isoCode, dialCode, currency, code", c)
		}
		for _, f := range []string{"id", "name", "isoCode", "dialCode", "currency", "code"} {
			if v, _ := c[f].(string); v == "" {
				t.Errorf("country %v: %s missing", c, f)
			}
		}
		if c["code"] != c["isoCode"] { // code is the ISO code again
			t.Errorf("country %v: code is not the ISO code", c)
		}
		if ids[c["id"].(string)] {
			t.Errorf("country id %v twice", c["id"])
		}
		ids[c["id"].(string)] = true
		byISO[c["isoCode"].(string)] = c
	}
	want := map[string][4]string{ // id, name, dialCode, currency
		"NG": {"cty_ng", "Nigeria", "234", "NGN"},
		"GH": {"cty_gh", "Ghana", "233", "GHS"},
		"KE": {"cty_ke", "Kenya", "254", "KES"},
		"ZA": {"cty_za", "South Africa", "27", "ZAR"},
		"GB": {"cty_gb", "United Kingdom", "44", "GBP"},
		"US": {"cty_us", "United States", "1", "USD"},
	}
	for iso, w := range want {
		c := byISO[iso]
		if c == nil || c["id"] != w[0] || c["name"] != w[1] || c["dialCode"] != w[2] || c["currency"] != w[3] {
			t.Errorf("country %s = %v, want %v", iso, c, w)
		}
	}
	banks := h.do(req{path: "/v1/payment/bank-list", key: h.std()}).expect(t, 200, "Banks fetched successfully").Data.([]any)
	if len(banks) < 20 {
		t.Fatalf("%d banks", len(banks))
	}
	codes := map[string]string{}
	for _, raw := range banks {
		b := raw.(map[string]any)
		name, _ := b["name"].(string)
		code, _ := b["code"].(string)
		nip, _ := b["nipCode"].(string)
		if len(b) != 3 || name == "" || code == "" || len(nip) != 6 {
			t.Errorf("bank %v, want exactly a name, a code and a 6-digit nipCode", b)
		}
		if _, dup := codes[code]; dup {
			t.Errorf("bank code %s twice", code)
		}
		codes[code] = name
	}
	for code, name := range map[string]string{"044": "Access Bank", "058": "Guaranty Trust Bank", "057": "Zenith Bank",
		"090267": "Kuda Microfinance Bank", "090405": "Moniepoint Microfinance Bank"} {
		if codes[code] != name {
			t.Errorf("bank %s = %q, want %q", code, codes[code], name)
		}
	}
	// Both are the same in the live environment.
	h.do(req{path: "/v1/countries", key: key(h.m, domain.Live, merchant.Standard), host: liveHost}).expect(t, 200, "Countries fetched successfully")
	h.do(req{path: "/v1/payment/bank-list", key: key(h.m, domain.Live, merchant.Standard), host: liveHost}).expect(t, 200, "Banks fetched successfully")
}

// TestCustomerIDRulePerRoute: every customer and reference-data route
// treats the customer-id header as the endpoint catalogue says: forbidden on the
// customer routes (whatever it names), ignored on verify-phone, countries
// and bank-list.
func TestCustomerIDRulePerRoute(t *testing.T) {
	h := newHarness(t)
	own := h.createCustomer(h.sa(), "ada@example.com", "08031234567")
	other := h.newMerchant(false)
	foreign := h.createCustomer(key(other, domain.Test, merchant.SuperAdmin), "bob@example.com", "08031234568")
	forbidden := []struct {
		name         string
		method, path string
		body         any
	}{
		{"create", "POST", "/v1/customer/create", customerBody("new@example.com", "08031234599")},
		{"get", "GET", "/v1/customer/get/" + own, nil},
		{"list", "GET", "/v1/customers", nil},
		{"lookup", "GET", "/v1/customers?email=ada@example.com", nil},
		{"update", "PUT", "/v1/customer/update/" + own, map[string]any{"firstname": "Changed"}},
		{"permissions", "PUT", "/v1/customer/permissions/" + own, map[string]any{"canBuy": false}},
		{"block", "PUT", "/v1/customer/block/" + own, map[string]any{"reason": "x"}},
		{"unblock", "PUT", "/v1/customer/unblock/" + own, nil},
	}
	for _, rt := range forbidden {
		for _, cid := range []string{own, foreign, "no-such-customer"} {
			t.Run(rt.name+" with customer-id "+cid, func(t *testing.T) {
				h.do(req{method: rt.method, path: rt.path, key: h.sa(), cid: cid, body: rt.body}).
					expect(t, 400, "customer-id is not allowed in request header")
			})
		}
	}
	// None of the refused writes happened.
	got := h.do(req{path: "/v1/customer/get/" + own, key: h.sa()}).expect(t, 200, "Customer fetched successfully").obj()
	if perms := got["permissions"].(map[string]any); got["firstname"] != "Ada" || got["status"] != "active" || perms["canBuy"] != true {
		t.Fatalf("refused requests changed the customer: %v", got)
	}
	h.do(req{path: "/v1/customers?email=new@example.com", key: h.sa()}).expect(t, 400, "No customer found with the provided email")

	ignored := []struct {
		name, path, message string
	}{
		{"verify-phone", "/v1/payment/verify-phone/2348031234567", "Customer fetched successfully"},
		{"countries", "/v1/countries", "Countries fetched successfully"},
		{"bank-list", "/v1/payment/bank-list", "Banks fetched successfully"},
	}
	for _, rt := range ignored {
		for _, cid := range []string{"", own, foreign, "no-such-customer"} {
			t.Run(rt.name+" with customer-id "+cid, func(t *testing.T) {
				r := h.do(req{path: rt.path, key: h.std(), cid: cid}).expect(t, 200, rt.message)
				if rt.name == "verify-phone" && r.obj()["customerId"] != own {
					t.Fatalf("verify-phone found %v, want %s", r.obj()["customerId"], own)
				}
			})
		}
	}
}

// TestCustomerCountry: a customer without countryId takes the merchant's
// country; countryId may be a country id from GET /v1/countries.
func TestCustomerCountry(t *testing.T) {
	h := newHarness(t)
	gm, err := h.svc.CreateMerchant(context.Background(), "Accra Shop", false, "GH", KeyDigest)
	if err != nil {
		t.Fatal(err)
	}
	h.wait(gm.Position)
	ghSA := key(gm, domain.Test, merchant.SuperAdmin)
	checkCountry := func(t *testing.T, c map[string]any, id, name, iso, phone string) {
		t.Helper()
		ct, _ := c["country"].(map[string]any)
		if c["countryId"] != id || c["phone"] != phone || ct["id"] != id || ct["name"] != name || ct["isoCode"] != iso {
			t.Fatalf("country of %v: want %s %s %s, phone %s", c, id, name, iso, phone)
		}
	}

	t.Run("inherits a non-NG merchant's country", func(t *testing.T) {
		// A Ghanaian number in its international spelling (233 + 9 digits).
		c := h.do(req{method: "POST", path: "/v1/customer/create", key: ghSA, body: customerBody("kofi@example.com", "233241234567")}).
			expect(t, 201, "Customer created successfully").obj()
		checkCountry(t, c, "cty_gh", "Ghana", "GH", "0241234567")
		got := h.do(req{path: "/v1/customer/get/" + c["customerId"].(string), key: ghSA}).expect(t, 200, "Customer fetched successfully").obj()
		checkCountry(t, got, "cty_gh", "Ghana", "GH", "0241234567")
		// The merchant's own dial code resolves its lookups.
		for _, p := range []string{"0241234567", "233241234567", "2330241234567"} {
			v := h.do(req{path: "/v1/payment/verify-phone/" + p, key: ghSA}).expect(t, 200, "Customer fetched successfully").obj()
			if v["customerId"] != c["customerId"] {
				t.Fatalf("verify-phone %s: %v", p, v)
			}
		}
	})

	t.Run("countryId as an id from GET /v1/countries", func(t *testing.T) {
		ghID := ""
		for _, raw := range h.do(req{path: "/v1/countries", key: h.std()}).expect(t, 200, "Countries fetched successfully").Data.([]any) {
			if c := raw.(map[string]any); c["isoCode"] == "GH" {
				ghID = c["id"].(string)
			}
		}
		if ghID == "" {
			t.Fatal("no GH in /v1/countries")
		}
		c := h.do(req{method: "POST", path: "/v1/customer/create", key: h.sa(),
			body: customerBody("ama@example.com", "0201234567", "countryId", ghID)}).expect(t, 201, "Customer created successfully").obj()
		checkCountry(t, c, ghID, "Ghana", "GH", "0201234567")
		// The NG merchant's customers without countryId stay Nigerian.
		n := h.do(req{method: "POST", path: "/v1/customer/create", key: h.sa(), body: customerBody("ngozi@example.com", "08031234567")}).
			expect(t, 201, "Customer created successfully").obj()
		checkCountry(t, n, "cty_ng", "Nigeria", "NG", "08031234567")
	})
}

// TestCustomerEnvironmentIsolation: a customer of one environment does not
// exist for the merchant's keys of the other, on every customer route.
func TestCustomerEnvironmentIsolation(t *testing.T) {
	h := newHarness(t)
	type env struct {
		name     string
		sa, std  string
		host     string
		id       string
		email    string
		phone    string
		otherEnv *env
	}
	test := &env{name: "test", sa: h.sa(), std: h.std(), email: "tess@example.com", phone: "08031234567"}
	live := &env{name: "live", sa: key(h.m, domain.Live, merchant.SuperAdmin), std: key(h.m, domain.Live, merchant.Standard),
		host: liveHost, email: "liv@example.com", phone: "08031234568"}
	test.otherEnv, live.otherEnv = live, test
	for _, e := range []*env{test, live} {
		e.id = h.do(req{method: "POST", path: "/v1/customer/create", key: e.sa, host: e.host, body: customerBody(e.email, e.phone)}).
			expect(t, 201, "Customer created successfully").obj()["customerId"].(string)
	}
	for _, e := range []*env{test, live} {
		o := e.otherEnv // the customer is o's; e's keys must not see it
		cases := []struct {
			name    string
			r       req
			status  int
			message string
		}{
			{"get", req{path: "/v1/customer/get/" + o.id, key: e.std}, 400, "Customer not found"},
			{"lookup by email", req{path: "/v1/customers?email=" + o.email, key: e.std}, 400, "No customer found with the provided email"},
			{"lookup by phone", req{path: "/v1/customers?phone=" + o.phone, key: e.std}, 400, "No customer found with the provided phone"},
			{"verify-phone", req{path: "/v1/payment/verify-phone/" + o.phone, key: e.std}, 400, "No customer found with the provided phone"},
			{"update", req{method: "PUT", path: "/v1/customer/update/" + o.id, key: e.sa, body: map[string]any{"firstname": "X"}}, 401, "Access denied"},
			{"permissions", req{method: "PUT", path: "/v1/customer/permissions/" + o.id, key: e.sa, body: map[string]any{"canBuy": false}}, 400, "Customer not found"},
			{"block", req{method: "PUT", path: "/v1/customer/block/" + o.id, key: e.sa, body: map[string]any{"reason": "x"}}, 400, "Customer not found"},
			{"unblock", req{method: "PUT", path: "/v1/customer/unblock/" + o.id, key: e.sa}, 400, "Customer not found"},
		}
		for _, c := range cases {
			t.Run(e.name+" key, "+o.name+" customer: "+c.name, func(t *testing.T) {
				c.r.host = e.host
				if c.r.method == "" {
					c.r.method = "GET"
				}
				h.do(c.r).expect(t, c.status, c.message)
			})
		}
		t.Run(e.name+" key, list", func(t *testing.T) {
			rows := h.do(req{path: "/v1/customers", key: e.std, host: e.host}).expect(t, 200, "Customers fetched successfully").obj()["data"].([]any)
			if len(rows) != 1 || rows[0].(map[string]any)["customerId"] != e.id || rows[0].(map[string]any)["environment"] != e.name {
				t.Fatalf("%s list: %v", e.name, rows)
			}
		})
	}
	// Each customer is untouched and still visible in its own environment.
	for _, e := range []*env{test, live} {
		got := h.do(req{path: "/v1/customer/get/" + e.id, key: e.std, host: e.host}).expect(t, 200, "Customer fetched successfully").obj()
		perms := got["permissions"].(map[string]any)
		if got["firstname"] != "Ada" || got["status"] != "active" || perms["canBuy"] != true || got["environment"] != e.name {
			t.Fatalf("%s customer changed from the other environment: %v", e.name, got)
		}
		v := h.do(req{path: "/v1/payment/verify-phone/" + e.phone, key: e.std, host: e.host}).expect(t, 200, "Customer fetched successfully").obj()
		if v["customerId"] != e.id {
			t.Fatalf("%s verify-phone: %v", e.name, v)
		}
	}
}

// TestCustomerAdminRouteErrors: the super-admin customer routes refuse
// unknown ids, standard keys and other merchants' customers.
func TestCustomerAdminRouteErrors(t *testing.T) {
	h := newHarness(t)
	own := h.createCustomer(h.sa(), "ada@example.com", "08031234567")
	other := h.newMerchant(false)
	foreign := h.createCustomer(key(other, domain.Test, merchant.SuperAdmin), "bob@example.com", "08031234568")
	// The foreign customer is blocked, so unblocking it would be a change.
	h.do(req{method: "PUT", path: "/v1/customer/block/" + foreign, key: key(other, domain.Test, merchant.SuperAdmin)}).
		expect(t, 200, "Customer blocked successfully")
	perms := map[string]any{"canSell": false}
	upd := map[string]any{"firstname": "X"}
	cases := []struct {
		name    string
		r       req
		status  int
		message string
	}{
		{"update unknown id", req{method: "PUT", path: "/v1/customer/update/no-such-customer", key: h.sa(), body: upd}, 401, "Access denied"},
		{"permissions unknown id", req{method: "PUT", path: "/v1/customer/permissions/no-such-customer", key: h.sa(), body: perms}, 400, "Customer not found"},
		{"block unknown id", req{method: "PUT", path: "/v1/customer/block/no-such-customer", key: h.sa()}, 400, "Customer not found"},
		{"unblock unknown id", req{method: "PUT", path: "/v1/customer/unblock/no-such-customer", key: h.sa()}, 400, "Customer not found"},
		{"permissions, standard key", req{method: "PUT", path: "/v1/customer/permissions/" + own, key: h.std(), body: perms}, 401, "Access denied"},
		{"block, standard key", req{method: "PUT", path: "/v1/customer/block/" + own, key: h.std()}, 401, "Access denied"},
		{"unblock, standard key", req{method: "PUT", path: "/v1/customer/unblock/" + own, key: h.std()}, 401, "Access denied"},
		{"update, another merchant's customer", req{method: "PUT", path: "/v1/customer/update/" + foreign, key: h.sa(), body: upd}, 401, "Access denied"},
		{"permissions, another merchant's customer", req{method: "PUT", path: "/v1/customer/permissions/" + foreign, key: h.sa(), body: perms}, 400, "Customer not found"},
		{"block, another merchant's customer", req{method: "PUT", path: "/v1/customer/block/" + foreign, key: h.sa()}, 400, "Customer not found"},
		{"unblock, another merchant's customer", req{method: "PUT", path: "/v1/customer/unblock/" + foreign, key: h.sa()}, 400, "Customer not found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { h.do(c.r).expect(t, c.status, c.message) })
	}
	got := h.do(req{path: "/v1/customer/get/" + own, key: h.sa()}).expect(t, 200, "Customer fetched successfully").obj()
	if p := got["permissions"].(map[string]any); p["canSell"] != true || got["status"] != "active" {
		t.Fatalf("own customer changed by refused requests: %v", got)
	}
	f := h.do(req{path: "/v1/customer/get/" + foreign, key: key(other, domain.Test, merchant.Standard)}).expect(t, 200, "Customer fetched successfully").obj()
	if p := f["permissions"].(map[string]any); p["canSell"] != true || f["status"] != "blocked" || f["firstname"] != "Ada" {
		t.Fatalf("foreign customer changed by another merchant: %v", f)
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
