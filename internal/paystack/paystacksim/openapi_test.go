package paystacksim_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/escrowd/escrowd/internal/paystack"
)

// The simulator's answers against Paystack's published OpenAPI document
// (testdata/paystack-openapi.yaml, the part of it describing the
// operations checked here): every documented field of every answer is
// there, with the documented type.

// schema is the part of an OpenAPI schema object the check reads.
type schema struct {
	Ref        string             `yaml:"$ref"`
	Type       string             `yaml:"type"`
	Nullable   bool               `yaml:"nullable"`
	Properties map[string]*schema `yaml:"properties"`
	Items      *schema            `yaml:"items"`
	AnyOf      []*schema          `yaml:"anyOf"`
	OneOf      []*schema          `yaml:"oneOf"`
	AllOf      []*schema          `yaml:"allOf"`
}

type mediaType struct {
	Schema *schema `yaml:"schema"`
}

type response struct {
	Ref     string               `yaml:"$ref"`
	Content map[string]mediaType `yaml:"content"`
}

type operation struct {
	OperationID string               `yaml:"operationId"`
	Responses   map[string]*response `yaml:"responses"`
}

type document struct {
	Paths      map[string]map[string]operation `yaml:"paths"`
	Components struct {
		Schemas   map[string]*schema   `yaml:"schemas"`
		Responses map[string]*response `yaml:"responses"`
	} `yaml:"components"`
}

func loadDocument(t *testing.T) *document {
	t.Helper()
	raw, err := os.ReadFile("testdata/paystack-openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var d document
	if err := yaml.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

func refName(ref, prefix string) (string, bool) { return strings.CutPrefix(ref, prefix) }

// answerSchema is the documented schema of path's method's answer with
// the given HTTP status.
func (d *document) answerSchema(t *testing.T, method, path, status string) *schema {
	t.Helper()
	op, ok := d.Paths[path][strings.ToLower(method)]
	if !ok {
		t.Fatalf("the document has no %s %s", method, path)
	}
	r := op.Responses[status]
	if r == nil {
		t.Fatalf("the document has no %s answer to %s %s", status, method, path)
	}
	if name, ok := refName(r.Ref, "#/components/responses/"); ok {
		r = d.Components.Responses[name]
	}
	if r == nil || r.Content["application/json"].Schema == nil {
		t.Fatalf("no JSON schema for %s %s %s", method, path, status)
	}
	return r.Content["application/json"].Schema
}

func (d *document) resolve(s *schema) *schema {
	for s != nil && s.Ref != "" {
		name, ok := refName(s.Ref, "#/components/schemas/")
		if !ok {
			return nil
		}
		s = d.Components.Schemas[name]
	}
	return s
}

// property is the schema of a documented field below s (a path of
// property names; "[]" steps into an array's items).
func (d *document) property(t *testing.T, s *schema, path ...string) *schema {
	t.Helper()
	for _, p := range path {
		s = d.resolve(s)
		switch {
		case s == nil:
		case p == "[]":
			s = s.Items
		default:
			s = s.Properties[p]
		}
		if s == nil {
			t.Fatalf("the document has no field %s", strings.Join(path, "."))
		}
	}
	return s
}

// diff is one departure from the document at a field (path, array
// indices left out): missing, null, or of another type.
type diff struct {
	path, kind, text string
}

func (f diff) String() string { return f.path + ": " + f.text }

func differ(at, kind, format string, args ...any) []diff {
	return []diff{{path: indices.ReplaceAllString(at, ""), kind: kind, text: fmt.Sprintf(format, args...)}}
}

var indices = regexp.MustCompile(`\[\d+\]`)

// conform lists where v departs from s: a documented field missing, or
// of another type than documented. Undocumented fields are the
// simulator's own business and not checked.
func (d *document) conform(at string, s *schema, v any) []diff {
	s = d.resolve(s)
	if s == nil {
		return differ(at, "schema", "unresolved schema")
	}
	if len(s.AllOf) > 0 {
		var out []diff
		for _, sub := range s.AllOf {
			out = append(out, d.conform(at, sub, v)...)
		}
		return out
	}
	if alts := append(append([]*schema(nil), s.AnyOf...), s.OneOf...); len(alts) > 0 {
		var first []diff
		for i, sub := range alts {
			got := d.conform(at, sub, v)
			if len(got) == 0 {
				return nil
			}
			if i == 0 {
				first = got
			}
		}
		return append(differ(at, "type", "matches none of the documented alternatives"), first...)
	}
	if v == nil {
		if s.Nullable || s.Type == "" {
			return nil
		}
		return differ(at, "null", "null, documented %s", s.Type)
	}
	switch s.Type {
	case "":
		return nil // any value
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return differ(at, "type", "%T, documented object", v)
		}
		var out []diff
		names := make([]string, 0, len(s.Properties))
		for name := range s.Properties {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			fv, present := obj[name]
			if !present {
				out = append(out, differ(at+"."+name, "missing", "missing")...)
				continue
			}
			out = append(out, d.conform(at+"."+name, s.Properties[name], fv)...)
		}
		return out
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return differ(at, "type", "%T, documented array", v)
		}
		var out []diff
		for i, item := range arr {
			if s.Items != nil {
				out = append(out, d.conform(fmt.Sprintf("%s[%d]", at, i), s.Items, item)...)
			}
		}
		return out
	case "string":
		if _, ok := v.(string); !ok {
			return differ(at, "type", "%T, documented string", v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return differ(at, "type", "%T, documented boolean", v)
		}
	case "integer":
		n, ok := v.(json.Number)
		if _, err := n.Int64(); !ok || err != nil {
			return differ(at, "type", "%T %v, documented integer", v, v)
		}
	case "number":
		if _, ok := v.(json.Number); !ok {
			return differ(at, "type", "%T, documented number", v)
		}
	default:
		return differ(at, "schema", "documented type %s not checked", s.Type)
	}
	return nil
}

func decodeJSON(t *testing.T, raw []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("answer is not JSON: %v: %s", err, raw)
	}
	return v
}

// call sends a request to the simulator as a client with the secret key
// would and returns the answer's status and body.
func call(t *testing.T, r *rig, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, r.sim.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, raw
}

// dataField is a string field of an answer's data object.
func dataField(t *testing.T, answer any, field string) string {
	t.Helper()
	s, _ := answer.(map[string]any)["data"].(map[string]any)[field].(string)
	if s == "" {
		t.Fatalf("answer without data.%s: %v", field, answer)
	}
	return s
}

// departures are where Paystack's answers depart from the document,
// which the simulator follows: the document's schemas are drawn from its
// examples, so a field the example had set is documented as a string or
// object, while Paystack answers null for one never set (as the
// document's own transaction schema has it for a customer's phone and
// metadata). Each is "path kind" as conform reports it.
var departures = map[string]string{
	"customer.data.phone null":                      "a customer created without a phone",
	"customer.data.metadata null":                   "a customer created without metadata",
	"dedicated_account.data.customer.phone null":    "its customer has no phone",
	"dedicated_account.data.customer.metadata null": "its customer has no metadata",
	"dedicated_accounts.data.customer.phone null":   "its customer has no phone",
	"recipient.data.email null":                     "a recipient created without an email",
	"transfer_verify.data.recipient.email null":     "its recipient has no email",
	"transfers.data.recipient.email null":           "its recipient has no email",
	"transfer.success.recipient.email null":         "its recipient has no email",
	"charge.success.authorization.exp_month null":   "a transfer into a dedicated account has no card",
	"charge.success.authorization.exp_year null":    "a transfer into a dedicated account has no card",
	"charge.success.authorization.signature null":   "a transfer into a dedicated account has no card",
	"charge.success.ip_address null":                "a transfer into a dedicated account has no browser",
	"transfer.success.integration type":             "an event names the integration as {id, is_live, business_name}",
}

// TestAnswersFollowOpenAPI walks the simulator's real HTTP answers of
// collections (customers, dedicated accounts, transactions, banks) and
// of transfers, and their signed events, against the document.
func TestAnswersFollowOpenAPI(t *testing.T) {
	d := loadDocument(t)
	r := start(t, nil)
	used := map[string]bool{}
	departs := func(f diff) bool {
		_, ok := departures[f.path+" "+f.kind]
		used[f.path+" "+f.kind] = true
		return ok
	}
	check := func(name, method, path, status string, body any, wantStatus int) any {
		t.Helper()
		got, raw := call(t, r, method, path, body)
		if fmt.Sprint(got) != status || got != wantStatus {
			t.Fatalf("%s %s answered %d, want %d: %s", method, path, got, wantStatus, raw)
		}
		v := decodeJSON(t, raw)
		docPath, _, _ := strings.Cut(path, "?")
		for _, p := range []struct{ prefix, templ string }{
			{"/transaction/verify/", "/transaction/verify/{reference}"}, {"/transfer/verify/", "/transfer/verify/{reference}"},
		} {
			if strings.HasPrefix(docPath, p.prefix) {
				docPath = p.templ
			}
		}
		for _, f := range d.conform(name, d.answerSchema(t, method, docPath, status), v) {
			if !departs(f) {
				t.Errorf("%s %s: %s", method, path, f)
			}
		}
		return v
	}

	cust := check("customer", "POST", "/customer", "200", map[string]any{"email": "ada@x.com", "first_name": "Ada", "last_name": "Obi"}, 200)
	code := dataField(t, cust, "customer_code")
	check("dedicated_account", "POST", "/dedicated_account", "200", map[string]any{"customer": code, "preferred_bank": "test-bank"}, 200)
	list := check("dedicated_accounts", "GET", "/dedicated_account", "200", nil, 200)
	accounts, _ := list.(map[string]any)["data"].([]any)
	if len(accounts) != 1 {
		t.Fatalf("dedicated accounts %v", list)
	}
	number, _ := accounts[0].(map[string]any)["account_number"].(string)
	if _, err := r.sim.PayIntoDedicatedAccount(number, 250_000); err != nil {
		t.Fatal(err)
	}

	ref := "esc_openapi_0001"
	init := check("initialize", "POST", "/transaction/initialize", "200", map[string]any{"email": "ada@x.com", "amount": 1_075_000,
		"reference": ref, "callback_url": "http://127.0.0.1:1/checkout/return", "channels": []string{"card"}}, 200)
	if dataField(t, init, "reference") != ref {
		t.Fatalf("initialized %v", init)
	}
	if err := r.sim.CompleteCheckout(ref, "card", true); err != nil {
		t.Fatal(err)
	}
	check("verify", "GET", "/transaction/verify/"+ref, "200", nil, 200)
	txs := check("transactions", "GET", "/transaction?perPage=50", "200", nil, 200)
	if n := len(txs.(map[string]any)["data"].([]any)); n != 2 {
		t.Fatalf("%d transactions listed, want the deposit and the card payment", n)
	}
	check("banks", "GET", "/bank?currency=NGN", "200", nil, 200)
	acct := validAccount(t, "012345678")
	check("resolve", "GET", "/bank/resolve?account_number="+acct+"&bank_code=058", "200", nil, 200)

	rcp := check("recipient", "POST", "/transferrecipient", "201",
		map[string]any{"type": "nuban", "name": "Ada Obi", "account_number": acct, "bank_code": "058", "currency": "NGN"}, 201)
	tref := paystack.TransferReference("0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c")
	check("transfer", "POST", "/transfer", "200", map[string]any{"source": "balance", "amount": 100_000,
		"recipient": dataField(t, rcp, "recipient_code"), "reference": tref, "reason": "withdrawal"}, 200)
	r.idle(t)
	check("transfer_verify", "GET", "/transfer/verify/"+tref, "200", nil, 200)
	check("transfers", "GET", "/transfer?perPage=50", "200", nil, 200)

	// Events: the document describes no webhook bodies, so an event's data
	// is checked against the object verify documents for it (a
	// transaction for charge.success, a transfer for transfer.success).
	seen := map[string]int{}
	for _, dl := range r.sim.Events() {
		ev := decodeJSON(t, dl.Body).(map[string]any)
		if ev["event"] != dl.Event {
			t.Fatalf("event %s with body %s", dl.Event, dl.Body)
		}
		var of *schema
		switch dl.Event {
		case "charge.success":
			of = d.property(t, d.answerSchema(t, "GET", "/transaction/verify/{reference}", "200"), "data")
		case "transfer.success":
			of = d.property(t, d.answerSchema(t, "GET", "/transfer/verify/{reference}", "200"), "data")
		default:
			continue
		}
		seen[dl.Event]++
		for _, f := range d.conform(dl.Event, of, ev["data"]) {
			if !departs(f) {
				t.Errorf("event %s: %s", dl.Event, f)
			}
		}
	}
	if seen["charge.success"] != 2 || seen["transfer.success"] != 1 {
		t.Fatalf("events checked %v", seen)
	}
	for d := range departures {
		if !used[d] {
			t.Errorf("departure %q is no longer seen: take it out", d)
		}
	}
}

// The check itself: a field missing, null where not nullable, or of
// another type is reported; an undocumented field is not.
func TestConformReportsDepartures(t *testing.T) {
	d := &document{}
	d.Components.Schemas = map[string]*schema{"Tx": {Type: "object", Properties: map[string]*schema{
		"id": {Type: "integer"}, "reference": {Type: "string"}, "paid_at": {Type: "string", Nullable: true},
		"log": {Type: "array", Items: &schema{Type: "object", Properties: map[string]*schema{"ok": {Type: "boolean"}}}},
	}}}
	s := &schema{Ref: "#/components/schemas/Tx"}
	for _, tc := range []struct {
		body string
		want []string
	}{
		{`{"id": 1, "reference": "r", "paid_at": null, "log": [{"ok": true}], "extra": 1}`, nil},
		{`{"id": 1, "paid_at": "x", "log": []}`, []string{"tx.reference: missing"}},
		{`{"id": 1.5, "reference": null, "paid_at": null, "log": [{"ok": "yes"}]}`, []string{
			"tx.id: json.Number 1.5, documented integer", "tx.log.ok: string, documented boolean", "tx.reference: null, documented string"}},
		{`[]`, []string{"tx: []interface {}, documented object"}},
	} {
		var got []string
		for _, f := range d.conform("tx", s, decodeJSON(t, []byte(tc.body))) {
			got = append(got, f.String())
		}
		sort.Strings(got)
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s: %q, want %q", tc.body, got, tc.want)
		}
	}
}
