package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// The end-to-end tests' answers are checked against httpapi/openapi.json
// with kin-openapi: the document is OpenAPI 3.1, which kin-openapi
// validates with a JSON Schema 2020-12 validator (santhosh-tekuri's), so
// the document is validated as served, not a 3.0 rendering of it.

// apiSpec is the loaded, validated document and its router, built once
// for the whole package's tests.
var apiSpec = sync.OnceValues(func() (*apiContract, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(OpenAPIDocument)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	return &apiContract{doc: doc, router: router}, nil
})

type apiContract struct {
	doc    *openapi3.T
	router routers.Router
}

// checkResponse says how an answer to req (its body in body) departs from
// the document: its operation's response for the status (or its default,
// the error envelope), body included. An answer to a /v1 path the
// document does not describe (404, 405) must be the error envelope.
func (c *apiContract) checkResponse(req *http.Request, status int, header http.Header, body []byte) error {
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		// No operation: the router's 404 or 405, in the error envelope.
		schema := c.doc.Components.Responses["Error"].Value.Content.Get("application/json").Schema.Value
		if !strings.HasPrefix(header.Get("Content-Type"), "application/json") {
			return &openapi3filter.ResponseError{Reason: "an answer outside the document is not JSON: " + header.Get("Content-Type")}
		}
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			return err
		}
		return schema.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse())
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 status,
		Header:                 header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(body)
	return openapi3filter.ValidateResponse(context.Background(), in)
}

// contractTransport checks every answer of the server under test against
// the document, reporting each departure as a failure of the test.
type contractTransport struct {
	t    testing.TB
	base http.RoundTripper
	// server is the harness's base URL: answers of other servers (a
	// webhook receiver, an image host) are not the API's.
	server string
}

// testRoutes is where the tests register routes of their own (h.probe,
// h.api.handle): /v1/probe and below, which openapi.json does not
// describe.
const testRoutes = "/v1/probe"

func isTestRoute(path string) bool { return path == testRoutes || strings.HasPrefix(path, testRoutes+"/") }

func (ct *contractTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := ct.base.RoundTrip(req)
	if err != nil || !strings.HasPrefix(req.URL.String(), ct.server+"/v1/") || isTestRoute(req.URL.Path) {
		return res, err
	}
	body, rerr := io.ReadAll(res.Body)
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		// The test sees the short body and judges it; nothing to check.
		return res, nil
	}
	contract, lerr := apiSpec()
	if lerr != nil {
		ct.t.Errorf("openapi.json: %v", lerr)
		return res, nil
	}
	if verr := contract.checkResponse(req, res.StatusCode, res.Header, body); verr != nil {
		ct.t.Errorf("%s %s: the %d answer departs from openapi.json: %v\nbody: %.2000s", req.Method, req.URL.RequestURI(), res.StatusCode, verr, body)
	}
	return res, nil
}

// client is the harness's HTTP client: every answer of the API it gets
// is checked against openapi.json.
func (h *harness) client() *http.Client {
	return &http.Client{Transport: &contractTransport{t: h.t, base: http.DefaultTransport, server: h.srv.URL}}
}

// The document loads and is a valid OpenAPI 3.1 document for kin-openapi.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	c, err := apiSpec()
	if err != nil {
		t.Fatal(err)
	}
	if !c.doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi %q: the validator must treat it as 3.1", c.doc.OpenAPI)
	}
}

// The contract check refuses what departs from the document: a wrong type,
// a value outside an enumeration, a field the document does not name, a
// missing field, a status the operation does not answer; it accepts the
// answer as the service gives it.
func TestOpenAPIContractRefusesDepartures(t *testing.T) {
	c, err := apiSpec()
	if err != nil {
		t.Fatal(err)
	}
	wallet := `{"status":200,"message":"Wallet fetched successfully","data":{"customerId":"c1","mainBalance":20000,"escrowBalance":0.5,"currency":"NGN"}}`
	topUp := `{"status":200,"message":"Wallet topped up successfully","data":{"id":"r1","reference":"ref","amount":20000,"fee":0,"currency":"NGN",
		"status":"success","transactionType":"deposit","creditType":"credit","customerId":"c1","merchantId":"m1","environment":"test",
		"narration":"","createdAt":"2026-01-02T03:04:05Z","updatedAt":"2026-01-02T03:04:05Z","mainBalance":20000}}`
	for _, tc := range []struct {
		name, method, path string
		status             int
		body               string
		ok                 bool
	}{
		{"the wallet as served", "GET", "/v1/wallet", 200, wallet, true},
		{"a top-up as served", "POST", "/v1/payment/topup", 200, topUp, true},
		{"an error as served", "GET", "/v1/wallet", 401, `{"status":401,"message":"Invalid API key","data":{}}`, true},
		{"a 429 as served", "GET", "/v1/wallet", 429, `{"status":429,"message":"Too many request"}`, true},
		{"an unknown route's 404", "GET", "/v1/nope", 404, `{"status":404,"message":"Not Found","data":{}}`, true},
		{"a balance as a string", "GET", "/v1/wallet", 200, strings.Replace(wallet, `"mainBalance":20000`, `"mainBalance":"20000"`, 1), false},
		{"another currency", "GET", "/v1/wallet", 200, strings.Replace(wallet, `"NGN"`, `"USD"`, 1), false},
		{"a field the document does not name", "GET", "/v1/wallet", 200, strings.Replace(wallet, `"currency"`, `"extra":1,"currency"`, 1), false},
		{"a missing field", "GET", "/v1/wallet", 200, strings.Replace(wallet, `"customerId":"c1",`, ``, 1), false},
		{"the envelope's status disagreeing", "GET", "/v1/wallet", 200, strings.Replace(wallet, `"status":200`, `"status":201`, 1), false},
		{"a status outside the enumeration", "POST", "/v1/payment/topup", 200, strings.Replace(topUp, `"success"`, `"done"`, 1), false},
		{"a field added to a closed record", "POST", "/v1/payment/topup", 200, strings.Replace(topUp, `"narration"`, `"extra":true,"narration"`, 1), false},
		{"a top-up without its balance", "POST", "/v1/payment/topup", 200, strings.Replace(topUp, `,"mainBalance":20000`, ``, 1), false},
		{"an error with data", "GET", "/v1/wallet", 400, `{"status":400,"message":"no","data":{"x":1}}`, false},
		{"a success status the operation does not answer", "GET", "/v1/wallet", 201, strings.Replace(wallet, `"status":200`, `"status":201`, 1), false},
		{"an unknown route's answer outside the envelope", "GET", "/v1/nope", 404, `{"error":"not found"}`, false},
	} {
		req, _ := http.NewRequest(tc.method, "http://127.0.0.1"+tc.path, nil)
		err := c.checkResponse(req, tc.status, http.Header{"Content-Type": {"application/json"}}, []byte(tc.body))
		if (err == nil) != tc.ok {
			t.Errorf("%s: accepted %v, want %v (%v)", tc.name, err == nil, tc.ok, err)
		}
	}
}
