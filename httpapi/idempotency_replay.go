// Capturing a keyed request's response and replaying it byte for byte.

package httpapi

import (
	"bytes"
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"
)

// notReplayed are headers that describe the connection or this very
// response, not the outcome being replayed.
var notReplayed = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Transfer-Encoding": true, "Date": true,
	headerIdempotencyReplayed: true,
}

// handlerHeaders are the headers the handler (and inner middleware) set:
// those that differ from before it ran. Outer middleware headers (request
// id, rate limit) belong to each request and are set afresh on a replay.
func handlerHeaders(before, after http.Header) http.Header {
	out := http.Header{}
	for k, vs := range after {
		if notReplayed[k] {
			continue
		}
		if old, ok := before[k]; ok && slices.Equal(old, vs) {
			continue
		}
		out[k] = vs
	}
	return out
}

func replayStored(c echo.Context, rec storedResponse) error {
	res := c.Response()
	h := res.Header()
	for k, vs := range rec.headers {
		h[k] = vs
	}
	h.Set(headerIdempotencyReplayed, "true")
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	res.WriteHeader(status)
	if len(rec.body) == 0 {
		return nil
	}
	_, err := res.Write(rec.body)
	return err
}

// captureWriter passes the response through and keeps a copy of the status,
// the headers as sent and the body.
type captureWriter struct {
	http.ResponseWriter
	status int
	header http.Header
	body   bytes.Buffer
}

func (w *captureWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 { // 1xx are interim, not the outcome
		w.status = code
		w.header = w.ResponseWriter.Header().Clone()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *captureWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(b)
	w.body.Write(b[:n])
	return n, err
}

// Unwrap lets http.ResponseController reach the connection (Flush etc.).
func (w *captureWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
