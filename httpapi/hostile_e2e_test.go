package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestHostileTextAnswers400: text that PostgreSQL cannot store (invalid
// UTF-8, NUL) in every place a request carries text answers 400 naming the
// place, never a 500, and nothing of the request is stored.
func TestHostileTextAnswers400(t *testing.T) {
	h := newHarness(t)
	cid := h.createCustomer(h.sa(), "ada@example.com", "08030000001")
	form, ct := escrowForm(t, map[string]string{"amount": "5000", "purpose": "bad\x00purpose", "whoPays": "buyer"}, 0)
	badUTF8Form, ct2 := escrowForm(t, map[string]string{"amount": "5000", "purpose": "bad\xffpurpose", "whoPays": "buyer"}, 0)
	for _, tc := range []struct {
		name string
		r    req
		msg  string
	}{
		{"customer-id invalid UTF-8", req{path: "/v1/wallet", key: h.std(), cid: "\xff\xfe"}, msgCustomerIDHeader},
		{"customer-id too long", req{path: "/v1/wallet", key: h.std(), cid: strings.Repeat("c", 256)}, msgCustomerIDHeader},
		{"Idempotency-Key invalid UTF-8", req{method: "POST", path: "/v1/customer/create", key: h.sa(),
			body: customerBody("b@example.com", "08030000002"), headers: map[string]string{"Idempotency-Key": "k\xff"}}, msgIdemKeyInvalid},
		{"query filter NUL", req{path: "/v1/customers?email=a%00b", key: h.std()}, msgQueryInvalid},
		{"query filter invalid UTF-8", req{path: "/v1/escrow/feeds?paymentToken=%FF", key: h.std()}, msgQueryInvalid},
		{"query name invalid UTF-8", req{path: "/v1/payment/history?%FF=1", key: h.std(), cid: cid}, msgQueryInvalid},
		{"path parameter NUL", req{path: "/v1/customer/get/a%00b", key: h.std()}, msgPathInvalid},
		{"path parameter invalid UTF-8", req{path: "/v1/escrow/verify/PT_%C3%28", key: h.std()}, msgPathInvalid},
		{"JSON text field NUL", req{method: "POST", path: "/v1/escrow/create", key: h.std(), cid: cid,
			body: `{"amount":5000,"purpose":"bad\u0000purpose","whoPays":"buyer"}`}, msgBodyText},
		{"JSON text field invalid UTF-8", req{method: "POST", path: "/v1/escrow/create", key: h.std(), cid: cid,
			body: "{\"amount\":5000,\"purpose\":\"bad\xffpurpose\",\"whoPays\":\"buyer\"}"}, "Invalid JSON body"},
		{"JSON key NUL", req{method: "PUT", path: "/v1/merchant/webhook", key: h.sa(), body: `{"url\u0000":"x"}`}, msgBodyText},
		{"multipart field NUL", req{method: "POST", path: "/v1/escrow/create", key: h.std(), cid: cid, body: form,
			headers: map[string]string{"Content-Type": ct}}, "purpose must be valid UTF-8 without NUL characters"},
		{"multipart field invalid UTF-8", req{method: "POST", path: "/v1/escrow/create", key: h.std(), cid: cid, body: badUTF8Form,
			headers: map[string]string{"Content-Type": ct2}}, "purpose must be valid UTF-8 without NUL characters"},
		{"X-Request-Id too long", req{path: "/v1/countries", key: h.std(),
			headers: map[string]string{"X-Request-Id": strings.Repeat("r", maxRequestIDLen+1)}}, msgRequestIDInvalid},
		{"X-Request-Id not printable ASCII", req{path: "/v1/countries", key: h.std(),
			headers: map[string]string{"X-Request-Id": "r\xffr"}}, msgRequestIDInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.r.method == "" {
				tc.r.method = "GET"
			}
			h.do(tc.r).expect(t, 400, tc.msg)
		})
	}
	// An escaped backslash before "u0000" is no NUL: the text is kept.
	r := h.do(req{method: "POST", path: "/v1/escrow/create", key: h.std(), cid: cid,
		body: `{"amount":5000,"purpose":"A\\u0000da","whoPays":"buyer"}`})
	r.expect(t, 201, "")
	if got := r.obj()["purpose"]; got != `A\u0000da` {
		t.Fatalf("purpose %q", got)
	}
	var customers, escrows int
	if err := h.pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE event_type = 'customer.created'),
		count(*) FILTER (WHERE event_type = 'escrow.created') FROM es_events`).Scan(&customers, &escrows); err != nil {
		t.Fatal(err)
	}
	if customers != 1 || escrows != 1 {
		t.Fatalf("%d customers and %d escrows created, want 1 each (the refused requests stored nothing)", customers, escrows)
	}
}

// TestNULInHeaderNeverReachesTheAPI: net/http refuses a header value with a
// NUL itself (400), before any handler; a raw request proves it, since Go's
// client will not send one.
func TestNULInHeaderNeverReachesTheAPI(t *testing.T) {
	h := newHarness(t)
	for _, hdr := range []string{"customer-id: a\x00b", "Idempotency-Key: a\x00b", "X-Request-Id: a\x00b"} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(h.srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET /v1/wallet HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n%s\r\n\r\n", h.std(), hdr)
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		conn.Close()
		if res.StatusCode != 400 {
			t.Fatalf("%q: %d, want 400", hdr, res.StatusCode)
		}
	}
}

// TestRequestIDIsBounded: the X-Request-Id recorded with every event is at
// most maxRequestIDLen bytes; a header block past maxHeaderBytes is refused
// by the server (431) before any handler reads it.
func TestRequestIDIsBounded(t *testing.T) {
	h := newHarness(t)
	id := strings.Repeat("r", maxRequestIDLen)
	h.do(req{method: "POST", path: "/v1/customer/create", key: h.sa(), body: customerBody("a@example.com", "08030000001"),
		headers: map[string]string{"X-Request-Id": id}}).expect(t, 201, "")
	var stored int
	if err := h.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM es_events WHERE metadata::jsonb->>'requestId' = $1`, id).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored == 0 {
		t.Fatal("a valid X-Request-Id was not recorded")
	}
	r := h.do(req{method: "POST", path: "/v1/customer/create", key: h.sa(), body: customerBody("b@example.com", "08030000002"),
		headers: map[string]string{"X-Request-Id": strings.Repeat("r", 900<<10)}})
	if r.Status != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("900 KB X-Request-Id: %d %s", r.Status, r.Raw)
	}
	var longest int
	if err := h.pool.QueryRow(context.Background(),
		`SELECT coalesce(max(length(metadata::jsonb->>'requestId')), 0) FROM es_events`).Scan(&longest); err != nil {
		t.Fatal(err)
	}
	if longest > maxRequestIDLen {
		t.Fatalf("a request id of %d bytes was stored", longest)
	}
}

// TestHugePageNumbers: a page number past int64, or whose OFFSET would
// overflow, reads an empty page (it used to be a 500).
func TestHugePageNumbers(t *testing.T) {
	h := newHarness(t)
	cid := h.createCustomer(h.sa(), "ada@example.com", "08030000001")
	for _, lst := range []struct {
		path string
		cid  string
	}{{"/v1/customers?", ""}, {"/v1/escrow/feeds?", ""}, {"/v1/merchant/transactions?", ""}, {"/v1/escrow/category/get?", ""},
		{"/v1/escrow/transactions?type=buy&", cid}, {"/v1/payment/history?", cid}} {
		for _, page := range []string{"9223372036854775807", "99999999999999999999999", "4611686018427387904"} {
			r := h.do(req{path: lst.path + "page=" + page + "&limit=100", key: h.sa(), cid: lst.cid})
			if r.Status != 200 {
				t.Fatalf("%s page %s: %d %s", lst.path, page, r.Status, r.Raw)
			}
		}
	}
}
