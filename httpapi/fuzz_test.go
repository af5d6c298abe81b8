package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/projections"
)

// Fuzz targets for every request decoder, driving the real Echo stack
// (auth, idempotency, handlers, commands, read models) in process on a
// database of their own: whatever the input, no answer may be a 5xx (a
// panic is one: the recover middleware answers 500). `make fuzz` runs each
// for $(FUZZTIME); testdata/fuzz holds the inputs worth keeping, which
// plain `go test` replays.

// fuzzEnv is one merchant with data for the fuzzed requests to act on.
type fuzzEnv struct {
	handler http.Handler
	sa, std string
	// ids fill {name} placeholders in fuzzed routes.
	ids map[string]string
}

func newFuzzEnv(f *testing.F) *fuzzEnv {
	f.Helper()
	pool := pgtest.NewPool(f)
	store := postgres.New(pool)
	f.Cleanup(store.Close)
	runner := projections.NewRunner(store, pool, zap.NewNop(), projections.All(nil)...)
	// A busy machine may hold the projector back for seconds; a 503 then
	// says so correctly, but is no finding of a decoder.
	runner.WaitTimeout = time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = runner.Run(ctx) }()
	f.Cleanup(func() { cancel(); <-done })
	// Callback URLs are not resolved (WebhookAllowPrivate): a fuzzed host
	// name must not become a DNS query.
	cfg := Config{Hosts: map[string]domain.Environment{liveHost: domain.Live},
		WebhookAllowPrivate: true, MaxReadyHorizon: time.Minute}
	api := wired.API(cfg, store, pool, runner, zap.NewNop(), nil)
	f.Cleanup(api.Close)
	m, err := api.App().CreateMerchant(context.Background(), "Fuzz", true, "NG", KeyDigest)
	if err != nil {
		f.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer wcancel()
	if err := runner.WaitFor(wctx, m.Position); err != nil {
		f.Fatal(err)
	}
	env := &fuzzEnv{handler: api.Handler(), sa: key(m, domain.Test, merchant.SuperAdmin),
		std: key(m, domain.Test, merchant.Standard), ids: map[string]string{}}
	obj := func(status int, method, path, cid, body string) map[string]any {
		f.Helper()
		rec := env.serve(method, path, map[string]string{"customer-id": cid}, "application/json", []byte(body))
		var out struct {
			Data map[string]any `json:"data"`
		}
		if rec.Code != status || json.Unmarshal(rec.Body.Bytes(), &out) != nil {
			f.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
		}
		return out.Data
	}
	cust := func(email, phone string) string {
		return obj(201, "POST", "/v1/customer/create", "",
			`{"firstname":"Ada","lastname":"Obi","email":"`+email+`","phone":"`+phone+`"}`)["customerId"].(string)
	}
	env.ids["seller"], env.ids["buyer"], env.ids["other"] = cust("s@fuzz.example", "08031111111"),
		cust("b@fuzz.example", "08032222222"), cust("o@fuzz.example", "08033333333")
	obj(200, "POST", "/v1/payment/topup", env.ids["buyer"], `{"amount":100000}`)
	env.ids["category"] = obj(201, "POST", "/v1/escrow/category/create", "", `{"name":"Phones"}`)["id"].(string)
	e := obj(201, "POST", "/v1/escrow/create", env.ids["seller"], `{"amount":5000,"purpose":"p","whoPays":"buyer"}`)
	env.ids["token"], env.ids["escrow"] = e["paymentToken"].(string), e["id"].(string)
	paid := obj(201, "POST", "/v1/escrow/create", env.ids["seller"], `{"amount":5000,"purpose":"paid","whoPays":"buyer"}`)
	env.ids["paidToken"], env.ids["paidEscrow"] = paid["paymentToken"].(string), paid["id"].(string)
	obj(200, "POST", "/v1/payment/escrow", env.ids["buyer"], `{"amount":5125,"reference":"fuzz-pay","transactionType":"escrow",`+
		`"gateway":"wallet","escrowDetails":{"escrowId":"`+env.ids["paidEscrow"]+`"}}`)
	env.ids["address"] = obj(201, "POST", "/v1/whitelist-address", env.ids["buyer"],
		`{"walletAddress":"0x00000000000000000000000000000000000abc01","network":"BSC"}`)["id"].(string)
	return env
}

// serve runs one request through the whole stack with the super-admin key.
func (env *fuzzEnv) serve(method, target string, headers map[string]string, contentType string, body []byte) *httptest.ResponseRecorder {
	for k, v := range env.ids {
		target = strings.ReplaceAll(target, "{"+k+"}", v)
	}
	req := httptest.NewRequest(method, "/", bytes.NewReader(body))
	path, query, _ := strings.Cut(target, "?")
	req.URL.Path, req.URL.RawPath, req.URL.RawQuery = path, "", query
	req.Header.Set("Authorization", "Bearer "+env.sa)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range headers {
		if v != "" {
			req.Header[http.CanonicalHeaderKey(k)] = []string{v}
		}
	}
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, req)
	return rec
}

// fuzzRoute is a route a fuzzed body is sent to, acting for a customer
// ("" none, else a key of fuzzEnv.ids).
type fuzzRoute struct{ method, path, cid string }

func (env *fuzzEnv) expectNo5xx(t *testing.T, r fuzzRoute, headers map[string]string, contentType string, body []byte) {
	t.Helper()
	if headers == nil {
		headers = map[string]string{}
	}
	if r.cid != "" {
		headers["customer-id"] = env.ids[r.cid]
	}
	rec := env.serve(r.method, r.path, headers, contentType, body)
	if rec.Code >= 500 {
		t.Fatalf("%s %s (%q): %d %s", r.method, r.path, body, rec.Code, rec.Body)
	}
	var envl Envelope
	if rec.Code != http.StatusNoContent && r.method != http.MethodHead && json.Unmarshal(rec.Body.Bytes(), &envl) != nil {
		t.Fatalf("%s %s (%q): %d, not an envelope: %s", r.method, r.path, body, rec.Code, rec.Body)
	}
}

// fuzzJSONRoutes runs fuzzed JSON bodies against one route family.
func fuzzJSONRoutes(f *testing.F, routes []fuzzRoute, seeds ...string) {
	env := newFuzzEnv(f)
	for i := range routes {
		for _, s := range append([]string{"", "{}", "null", "[]", `{"amount":1e400}`, "{\"x\":\"\\u0000\"}"}, seeds...) {
			f.Add(uint8(i), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		env.expectNo5xx(t, routes[int(route)%len(routes)], nil, "application/json", body)
	})
}

func FuzzCustomerBodies(f *testing.F) {
	fuzzJSONRoutes(f, []fuzzRoute{
		{"POST", "/v1/customer/create", ""},
		{"PUT", "/v1/customer/update/{other}", ""},
		{"PUT", "/v1/customer/permissions/{other}", ""},
		{"PUT", "/v1/customer/block/{other}", ""},
		{"PUT", "/v1/customer/unblock/{other}", ""},
	},
		`{"firstname":"Ada","lastname":"Obi","email":"x@y.example","phone":"2348030000009","bvn":"12345678901","dob":"1990-01-31","countryId":"cty_ng"}`,
		`{"firstname":"Ada","phone":"+2348030000009"}`, `{"canBuy":"yes","canSell":null}`, `{"reason":5}`,
		`{"email":"a@b.c","dob":"9999-99-99"}`)
}

func FuzzEscrowBodies(f *testing.F) {
	fuzzJSONRoutes(f, []fuzzRoute{
		{"POST", "/v1/escrow/create", "seller"},
		{"PUT", "/v1/escrow/edit/{token}", "seller"},
		{"PUT", "/v1/escrow/additional-fee/{token}", ""},
		{"POST", "/v1/payment/escrow", "buyer"},
		{"POST", "/v1/escrow/confirm-payment/{paidEscrow}", "buyer"},
		{"DELETE", "/v1/escrow/delete/{token}", "seller"},
	},
		`{"amount":5000,"purpose":"p","whoPays":"both","maxDelivery":365,"deliveryTimeline":"HOURS","totalQuantity":3,"categoryId":"x"}`,
		`{"amount":"5000","maxDelivery":"0","totalQuantity":-1}`, `{"additionalFee":100.5,"additionalFeeRefundable":false}`,
		`{"amount":5125,"reference":"r1","transactionType":"escrow","gateway":"wallet","escrowDetails":{"escrowId":["a","b"]}}`,
		`{"amount":9223372036854775807,"purpose":"p","whoPays":"seller"}`)
}

func FuzzPaymentBodies(f *testing.F) {
	fuzzJSONRoutes(f, []fuzzRoute{
		{"POST", "/v1/payment/topup", "buyer"},
		{"POST", "/v1/payment/create-intent", "buyer"},
		{"POST", "/v1/payment/verify", "buyer"},
		{"POST", "/v1/payment/verify-account", "buyer"},
	},
		`{"amount":100.25,"reference":"d1","transactionType":"deposit","currency":"NGN","depositDetails":{}}`,
		`{"amount":150,"reference":"w1","transactionType":"withdrawal","withdrawalDetails":{"accountName":"A","accountNumber":"0123456789","bankCode":"058","bankName":"GTB","narration":"n"}}`,
		`{"amount":150,"reference":"c1","transactionType":"withdrawal","blockchainDetails":{"toAddress":"0x00000000000000000000000000000000000abc01","network":"BSC"}}`,
		`{"amount":150,"reference":"t1","transactionType":"wallet_transfer","walletDetails":{"phone":"08033333333","narration":"n"}}`,
		`{"reference":"d1"}`, `{"references":["d1","w1",""]}`, `{"accountNumber":"0123456789","bankCode":"000013"}`,
		`{"amount":"1e3"}`, `{"amount":-0.001}`)
}

func FuzzCategoryBodies(f *testing.F) {
	fuzzJSONRoutes(f, []fuzzRoute{
		{"POST", "/v1/escrow/category/create", ""},
		{"PUT", "/v1/escrow/category/edit/{category}", ""},
	}, `{"name":"Cars","description":"d","category_position":2}`, `{"name":""}`, `{"name":["x"]}`)
}

func FuzzMerchantBodies(f *testing.F) {
	fuzzJSONRoutes(f, []fuzzRoute{
		{"PUT", "/v1/merchant/webhook", ""},
		{"POST", "/v1/whitelist-address", "buyer"},
		{"POST", "/v1/merchant/webhook/deliveries/{escrow}/retry", ""},
		{"POST", "/v1/payment/virtual-account", ""},
	},
		`{"url":"https://[::127.0.0.1]/"}`, `{"url":"http://a.example:99999/"}`, `{"url":"http://%zz/"}`,
		`{"walletAddress":"0xABCDEF0000000000000000000000000000000001","network":"bsc","otp":1}`)
}

// FuzzMultipartBodies: escrow create and edit as multipart/form-data, with
// a fuzzed body and boundary.
func FuzzMultipartBodies(f *testing.F) {
	env := newFuzzEnv(f)
	form := func(fields map[string]string, withFile bool) []byte {
		var b strings.Builder
		for k, v := range fields {
			b.WriteString("--B\r\nContent-Disposition: form-data; name=\"" + k + "\"\r\n\r\n" + v + "\r\n")
		}
		if withFile {
			b.WriteString("--B\r\nContent-Disposition: form-data; name=\"imageUrl\"; filename=\"a.png\"\r\nContent-Type: image/png\r\n\r\n\x89PNG\r\n\x1a\n\r\n")
		}
		b.WriteString("--B--\r\n")
		return []byte(b.String())
	}
	f.Add(false, "B", form(map[string]string{"amount": "5000", "purpose": "p", "whoPays": "buyer"}, false))
	f.Add(true, "B", form(map[string]string{"purpose": "q", "maxDelivery": "3"}, true))
	f.Add(false, "B", form(map[string]string{"amount": "5000", "purpose": "p\x00", "whoPays": "buyer"}, true))
	f.Add(false, "", []byte("--\r\n"))
	f.Add(true, "B", []byte("--B\r\nContent-Disposition: form-data; name=\"imageUrl\"; filename=\"\"\r\n\r\n"))
	f.Fuzz(func(t *testing.T, edit bool, boundary string, body []byte) {
		r := fuzzRoute{"POST", "/v1/escrow/create", "seller"}
		if edit {
			r = fuzzRoute{"PUT", "/v1/escrow/edit/{token}", "seller"}
		}
		env.expectNo5xx(t, r, nil, "multipart/form-data; boundary="+boundary, body)
	})
}

// FuzzQueryParameters: every listing's filters and paging.
func FuzzQueryParameters(f *testing.F) {
	env := newFuzzEnv(f)
	routes := []fuzzRoute{
		{"GET", "/v1/customers", ""},
		{"GET", "/v1/escrow/feeds", ""},
		{"GET", "/v1/escrow/transactions", "seller"},
		{"GET", "/v1/payment/history", "buyer"},
		{"GET", "/v1/merchant/transactions", ""},
		{"GET", "/v1/escrow/category/get", ""},
		{"GET", "/v1/merchant/webhook/deliveries", ""},
		{"GET", "/v1/whitelist-address", "buyer"},
	}
	for i := range routes {
		for _, q := range []string{"", "page=9223372036854775807&limit=-1", "page=0&limit=1000000", "fromDate=2024-02-30&toDate=x",
			"fromDate=0000-01-01T00:00:00Z&toDate=9999-12-31", "type=sales,buy&status=opened", "email=%00", "phone=%FF%FE",
			"customerId=a&customerId=b", "reference=%27%3B--", "status=delivered&event=payment.", "paymentToken=PT_&categoryId=%E2%80%8B"} {
			f.Add(uint8(i), q)
		}
	}
	f.Fuzz(func(t *testing.T, route uint8, query string) {
		r := routes[int(route)%len(routes)]
		r.path += "?" + query
		env.expectNo5xx(t, r, nil, "", nil)
	})
}

// FuzzPathParameters: ids in paths.
func FuzzPathParameters(f *testing.F) {
	env := newFuzzEnv(f)
	routes := []fuzzRoute{
		{"GET", "/v1/customer/get/", ""},
		{"GET", "/v1/payment/verify-phone/", ""},
		{"GET", "/v1/escrow/verify/", "seller"},
		{"GET", "/v1/escrow/claim-funds/", "seller"},
		{"GET", "/v1/escrow/category/get/", ""},
		{"DELETE", "/v1/whitelist-address/", "buyer"},
		{"GET", "/files/", ""},
	}
	for i := range routes {
		for _, p := range []string{"", "x", "PT_AAAAAAAAAAAAAAAA", "00000000-0000-0000-0000-000000000000", "2348030000009",
			"+2348031111111", "..%2F..%2Fetc%2Fpasswd", "\x00", "\xff", strings.Repeat("9", 300)} {
			f.Add(uint8(i), p)
		}
	}
	f.Fuzz(func(t *testing.T, route uint8, param string) {
		r := routes[int(route)%len(routes)]
		r.path += param
		env.expectNo5xx(t, r, nil, "", nil)
	})
}

// FuzzRequestHeaders: the headers that reach storage (customer-id,
// Idempotency-Key, X-Request-Id) on a write that stores all three.
func FuzzRequestHeaders(f *testing.F) {
	env := newFuzzEnv(f)
	f.Add("{seller}", "k1", "req-1")
	f.Add("\xff", "\x00", strings.Repeat("r", 200))
	f.Add("", strings.Repeat("k", 256), "a b")
	f.Fuzz(func(t *testing.T, cid, idemKey, requestID string) {
		for k, v := range env.ids {
			cid = strings.ReplaceAll(cid, "{"+k+"}", v)
		}
		env.expectNo5xx(t, fuzzRoute{"POST", "/v1/escrow/create", ""},
			map[string]string{"customer-id": cid, "Idempotency-Key": idemKey, "X-Request-Id": requestID},
			"application/json", []byte(`{"amount":5000,"purpose":"p","whoPays":"buyer"}`))
	})
}

// FuzzParseDateBound: the date filter parser never panics, and as an end
// bound it never comes before the same text as a start bound (a date is
// inclusive: the next midnight).
func FuzzParseDateBound(f *testing.F) {
	for _, s := range []string{"2024-02-29", "2023-02-29", "9999-12-31", "0000-01-01", "2024-01-01T00:00:00Z",
		"2024-01-01T00:00:00.123456789+14:00", "2024-01-01T24:00:00Z", "", "2024-1-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		start, err := parseDateBound(raw, false)
		end, err2 := parseDateBound(raw, true)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("%q: accepted as one bound only (%v, %v)", raw, err, err2)
		}
		if err == nil && end.Before(start) {
			t.Fatalf("%q: end bound %s before start bound %s", raw, end, start)
		}
	})
}
