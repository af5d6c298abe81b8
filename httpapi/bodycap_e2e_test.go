package httpapi

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// jsonFiller is a JSON object body of exactly size bytes, one long string
// field, generated as it is read: the client side of the test allocates
// nothing for it, so the process's memory counts only what the server does.
type jsonFiller struct {
	size, off int64
}

func (r *jsonFiller) Read(p []byte) (int, error) {
	const head, tail = `{"purpose":"`, `"}`
	if r.off >= r.size {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && r.off < r.size {
		switch {
		case r.off < int64(len(head)):
			p[n] = head[r.off]
		case r.off >= r.size-int64(len(tail)):
			p[n] = tail[r.off-(r.size-int64(len(tail)))]
		default:
			p[n] = 'a'
		}
		n++
		r.off++
	}
	return n, nil
}

// TestHugeJSONBodiesOnUploadRoutesCostLittle: a JSON body on a route that
// also takes multipart uploads has the JSON cap (1 MB), not the upload one.
// Ten parallel 31 MB bodies to each such route, with and without a declared
// length, with and without Idempotency-Key, all answer 413, and the whole
// run allocates a few MB per request, never the body's size: the body is
// refused while it is read and never copied whole.
func TestHugeJSONBodiesOnUploadRoutesCostLittle(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "seller@example.com", "08030000001")
	token, _ := h.createEscrow(seller, map[string]string{"amount": "5000", "purpose": "Phone", "whoPays": "buyer"}, 0).
		expect(t, 201, "").obj()["paymentToken"].(string)
	escrowID, _ := h.viewEscrow(token, seller)["id"].(string)
	catID, _ := h.do(req{method: "POST", path: "/v1/escrow/category/create", key: h.sa(), body: map[string]any{"name": "Phones"}}).
		expect(t, 201, "").obj()["id"].(string)
	if token == "" || escrowID == "" || catID == "" {
		t.Fatalf("set-up: token %q escrow %q category %q", token, escrowID, catID)
	}
	routes := []struct{ method, path, cid string }{
		{"POST", "/v1/escrow/create", seller},
		{"PUT", "/v1/escrow/edit/" + token, seller},
		{"POST", "/v1/escrow/submit-dispute/" + token, seller},
		{"POST", "/v1/escrow/dispute/resolve/" + escrowID, ""},
		{"POST", "/v1/escrow/category/create", ""},
		{"PUT", "/v1/escrow/category/edit/" + catID, ""},
	}
	const size, parallel = 31 << 20, 10

	// The peak of heap in use counts garbage the collector has not reached
	// yet; at the default pacing that is up to the live heap again, so the
	// figure would swing with GC timing. A tighter pacing for the run makes
	// the peak follow what the refusals really hold.
	defer debug.SetGCPercent(debug.SetGCPercent(25))
	var peak atomic.Uint64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	go func() {
		defer close(sampled)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	}()

	var wg sync.WaitGroup
	errs := make(chan error, len(routes)*parallel)
	for _, rt := range routes {
		for i := range parallel {
			wg.Add(1)
			go func() {
				defer wg.Done()
				hdr := map[string]string{"Authorization": "Bearer " + h.sa(), "Content-Type": "application/json"}
				if rt.cid != "" {
					hdr["Authorization"] = "Bearer " + h.std()
					hdr["customer-id"] = rt.cid
				}
				if i%4 < 2 {
					hdr["Idempotency-Key"] = fmt.Sprintf("huge-%s-%d", rt.path, i)
				}
				// Even ones declare their length, odd ones are sent chunked.
				status, err := rawRequest(h.srv.URL, rt.method, rt.path, hdr, &jsonFiller{size: size}, i%2 == 0)
				if err != nil {
					errs <- fmt.Errorf("%s %s #%d: %v", rt.method, rt.path, i, err)
					return
				}
				if status != http.StatusRequestEntityTooLarge {
					errs <- fmt.Errorf("%s %s #%d: %d, want 413", rt.method, rt.path, i, status)
				}
			}()
		}
	}
	wg.Wait()
	close(stopSampling)
	<-sampled
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	requests := uint64(len(routes) * parallel)
	allocated := after.TotalAlloc - before.TotalAlloc
	grew := int64(peak.Load()) - int64(before.HeapInuse)
	t.Logf("%d requests allocated %d MB in all; heap in use grew by at most %d MB", requests, allocated>>20, grew>>20)
	// Each request may read up to the 1 MB cap (a buffer, or the spool of a
	// keyed one); a body read whole would allocate its 31 MB at least.
	if perRequest := allocated / requests; perRequest > 8<<20 {
		t.Errorf("%d bytes allocated per refused request: the body was read past the JSON cap", perRequest)
	}
	if grew > 120<<20 {
		t.Errorf("heap in use grew by %d MB while refusing the bodies", grew>>20)
	}
}

// rawRequest sends a request over its own connection and returns the
// answer's status. The body is written beside the read of the answer and
// write errors are ignored: a server that refuses a large body answers and
// closes without reading it, and Go's client would then report the broken
// pipe rather than the answer that came first.
func rawRequest(base, method, path string, headers map[string]string, body io.Reader, declared bool) (int, error) {
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	var head strings.Builder
	fmt.Fprintf(&head, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, path, strings.TrimPrefix(base, "http://"))
	for k, v := range headers {
		fmt.Fprintf(&head, "%s: %s\r\n", k, v)
	}
	size := int64(-1)
	if f, ok := body.(*jsonFiller); ok && declared {
		size = f.size
	}
	if size >= 0 {
		fmt.Fprintf(&head, "Content-Length: %d\r\n\r\n", size)
	} else {
		head.WriteString("Transfer-Encoding: chunked\r\n\r\n")
	}
	go func() {
		if _, err := io.WriteString(conn, head.String()); err != nil {
			return
		}
		if size >= 0 {
			_, _ = io.Copy(conn, body)
			return
		}
		cw := httputil.NewChunkedWriter(conn)
		if _, err := io.Copy(cw, body); err == nil {
			_ = cw.Close()
			_, _ = io.WriteString(conn, "\r\n")
		}
	}()
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode, nil
}
