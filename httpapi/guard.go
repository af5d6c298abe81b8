package httpapi

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/escrowd/escrowd/domain"
)

// Request text that reaches storage must be text PostgreSQL can hold and of
// a bounded size. PostgreSQL refuses invalid UTF-8 and NUL in every text
// column (and the event store refuses \u0000 in an event), so such input
// used to fail deep inside a command or a query as a 500; it is refused
// here, at the edge, as a 400 naming what was wrong.
const (
	// maxRequestIDLen bounds X-Request-Id, which every event of the request
	// records in its metadata: the append-only log must not grow by
	// whatever a client puts in a header.
	maxRequestIDLen = 128
	// maxCustomerIDLen bounds the customer-id header, a lookup key.
	maxCustomerIDLen = 255
	// maxHeaderBytes bounds a request's header block (net/http's default is
	// 1 MB); an API request's headers are a few hundred bytes.
	maxHeaderBytes = 64 << 10
)

const (
	msgRequestIDInvalid = "X-Request-Id must be at most 128 printable ASCII characters"
	msgCustomerIDHeader = "customer-id header must be valid text"
	msgIdemKeyInvalid   = "Idempotency-Key must be valid text"
	msgQueryInvalid     = "Query parameters must be valid text"
	msgPathInvalid      = "Path parameters must be valid text"
	msgBodyText         = "Text fields must be valid UTF-8 without NUL characters"
)

// validText reports whether s is UTF-8 without NUL, so any text column can
// store it.
func validText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// validRequestID: printable ASCII without spaces, as request ids from
// proxies and tracing libraries are.
func validRequestID(s string) bool {
	if len(s) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// textGuard checks the request's headers that reach storage, its query
// parameters and its path parameters (it runs after routing).
func textGuard(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if !validRequestID(r.Header.Get("X-Request-Id")) {
			return domain.Invalidf(msgRequestIDInvalid)
		}
		if cid := r.Header.Get("customer-id"); len(cid) > maxCustomerIDLen || !validText(cid) {
			return domain.Invalidf(msgCustomerIDHeader)
		}
		if !validText(r.Header.Get(headerIdempotencyKey)) {
			return domain.Invalidf(msgIdemKeyInvalid)
		}
		for k, vs := range r.URL.Query() {
			if !validText(k) {
				return domain.Invalidf(msgQueryInvalid)
			}
			for _, v := range vs {
				if !validText(v) {
					return domain.Invalidf(msgQueryInvalid)
				}
			}
		}
		for _, v := range c.ParamValues() {
			if !validText(v) {
				return domain.Invalidf(msgPathInvalid)
			}
		}
		return next(c)
	}
}

// checkJSONText refuses a JSON body that is not UTF-8 or whose strings hold
// an escaped NUL (\u0000): encoding/json would turn the first into U+FFFD
// silently in some places and keep it raw in others (json.RawMessage), and
// the second into a NUL no text column stores.
func checkJSONText(body []byte) error {
	if !utf8.Valid(body) {
		return domain.Invalidf("Invalid JSON body")
	}
	if !bytes.Contains(body, []byte(`\u`)) {
		return nil
	}
	inString := false
	for i := 0; i < len(body); i++ {
		switch b := body[i]; {
		case b == '"':
			inString = !inString
		case b == '\\' && inString && i+1 < len(body):
			if body[i+1] == 'u' && i+5 < len(body) && string(body[i+2:i+6]) == "0000" {
				return domain.Invalidf(msgBodyText)
			}
			i++ // the escaped character, a quote or backslash included
		}
	}
	return nil
}

// checkFormText refuses multipart fields that are not storable text.
func checkFormText(vals map[string][]string) error {
	for k, vs := range vals {
		if !validText(k) {
			return domain.Invalidf(msgBodyText)
		}
		for _, v := range vs {
			if !validText(v) {
				return domain.Invalidf("%s must be valid UTF-8 without NUL characters", k)
			}
		}
	}
	return nil
}
