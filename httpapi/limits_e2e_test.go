package httpapi

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
)

// TestSlowClientsAreCutOff: clients that send their headers or their body
// too slowly (slowloris) are disconnected at the server's limits, while
// the server keeps answering everyone else.
func TestSlowClientsAreCutOff(t *testing.T) {
	lim := Limits{ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: 5 * time.Second,
		IdleTimeout: time.Second, MaxHeaderBytes: maxHeaderBytes}
	h := startHarnessWith(t, harnessOptions{limits: &lim}, nil)
	addr := strings.TrimPrefix(h.srv.URL, "http://")
	const slow = 40
	var wg, started sync.WaitGroup
	cut := make(chan time.Duration, 2*slow)
	trickle := func(first string, rest string) {
		defer wg.Done()
		begun := sync.OnceFunc(started.Done)
		defer begun()
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		start := time.Now()
		if _, err := io.WriteString(conn, first); err != nil {
			t.Error(err)
			return
		}
		begun() // the server holds this connection's request open now
		// One byte every 100 ms, for up to 10 s: far slower than the limits.
		for i := 0; i < 100; i++ {
			time.Sleep(100 * time.Millisecond)
			if _, err := conn.Write([]byte{rest[i%len(rest)]}); err != nil {
				break
			}
		}
		// Whatever the server answered (a 408 or nothing), the connection
		// ends: reading reaches its end.
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.ReadAll(conn)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Error("the server kept a slow connection open")
			return
		}
		cut <- time.Since(start)
	}
	for i := 0; i < slow; i++ {
		wg.Add(2)
		started.Add(2)
		// Slow headers: a request line, then a header that never ends.
		go trickle("GET /v1/countries HTTP/1.1\r\nHost: x\r\nX-Slow: ", "abcdefgh")
		// Slow body: whole headers, then a body one byte at a time.
		go trickle(fmt.Sprintf("POST /v1/customer/create HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"firstname\":\"", h.sa()), "aaaaaaaa")
	}
	// Meanwhile (every slow client has begun its request) the server
	// answers others at once.
	started.Wait()
	for i := 0; i < 5; i++ {
		start := time.Now()
		h.do(req{path: "/v1/countries", key: h.std()}).expect(t, 200, "")
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("a normal request took %s beside slow clients", d)
		}
	}
	wg.Wait()
	close(cut)
	n := 0
	for d := range cut {
		n++
		// Cut off at the limit (plus the byte in flight and scheduling),
		// not after the client's 10 s.
		if d > lim.ReadTimeout+2*time.Second {
			t.Errorf("a slow client was cut off after %s", d)
		}
	}
	if n != 2*slow {
		t.Fatalf("%d of %d slow clients observed", n, 2*slow)
	}
}

// TestEndlessBodyIsCutOff: a body that never ends is answered 413 once it
// passes the route's limit; the server does not read (or buffer) the rest,
// with or without Idempotency-Key (which spools keyed bodies).
func TestEndlessBodyIsCutOff(t *testing.T) {
	h := newHarness(t)
	for _, keyed := range []bool{false, true} {
		for _, tc := range []struct{ path, ct, prefix string }{
			{"/v1/customer/create", "application/json", `{"firstname":"`},
			{"/v1/escrow/create", "multipart/form-data; boundary=x", "--x\r\nContent-Disposition: form-data; name=\"imageUrl\"; filename=\"a.png\"\r\n\r\n"},
		} {
			sent := countingReader{prefix: tc.prefix}
			hr, err := http.NewRequest("POST", h.srv.URL+tc.path, &sent) // chunked: no length
			if err != nil {
				t.Fatal(err)
			}
			hr.Header.Set("Authorization", "Bearer "+h.sa())
			hr.Header.Set("Content-Type", tc.ct)
			if keyed {
				hr.Header.Set("Idempotency-Key", "endless-"+tc.path)
			}
			res, err := h.client().Do(hr)
			if err != nil {
				t.Fatalf("%s: %v", tc.path, err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("%s (keyed %v): %d", tc.path, keyed, res.StatusCode)
			}
			if n := sent.n.Load(); n > 64<<20 {
				t.Fatalf("%s: the server read %d bytes of an endless body", tc.path, n)
			}
		}
	}
}

// countingReader is an endless body, prefix then 'a's, that counts what
// was read.
type countingReader struct {
	prefix string
	n      atomic.Int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	if r.n.Load() > 256<<20 {
		return 0, io.EOF // a safety stop: the test fails above
	}
	k := 0
	if r.n.Load() == 0 {
		k = copy(p, r.prefix)
	}
	for i := k; i < len(p); i++ {
		p[i] = 'a'
	}
	r.n.Add(int64(len(p)))
	return len(p), nil
}

// TestKeysNeverLogged: no API key reaches the logs, whatever a client does
// with it: a valid, unknown, revoked or other environment's key, a key in
// the path or the query, in a body that fails validation, or in an
// Idempotency-Key.
func TestKeysNeverLogged(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	h := startHarnessWith(t, harnessOptions{log: zap.New(core)}, nil)
	unknown := "sk_test_" + strings.Repeat("Z", 40)
	live := key(h.m, domain.Live, merchant.SuperAdmin)
	secrets := []string{h.sa(), h.std(), unknown, live}
	for _, r := range []req{
		{path: "/v1/countries", key: h.std()},
		{path: "/v1/countries", key: unknown},
		{path: "/v1/countries", key: live},
		{path: "/v1/customers", key: h.std(), cid: h.sa()},
		{path: "/v1/customer/get/" + h.sa(), key: h.std()},
		{path: "/v1/customers?email=" + h.sa(), key: h.std()},
		{path: "/v1/no-such-route/" + h.std()},
		{method: "POST", path: "/v1/customer/create", key: h.sa(), body: map[string]any{"firstname": h.sa()}},
		{method: "POST", path: "/v1/customer/create", key: h.sa(), body: map[string]any{"firstname": "x"},
			headers: map[string]string{"Idempotency-Key": h.sa()}},
		{method: "PUT", path: "/v1/merchant/webhook", key: h.sa(), body: map[string]any{"url": "https://" + h.std() + ".invalid/"}},
		{path: "/v1/countries", headers: map[string]string{"Authorization": h.sa()}}, // no "Bearer "
	} {
		if r.method == "" {
			r.method = "GET"
		}
		h.do(r)
	}
	if logs.Len() == 0 {
		t.Fatal("nothing was logged: the test observes nothing")
	}
	for _, e := range logs.All() {
		line := fmt.Sprint(e.Message, " ", e.ContextMap())
		for _, k := range secrets {
			// Any 16 characters of a key's random part are as good as a leak.
			if strings.Contains(line, k[8:24]) {
				t.Errorf("a key in the log: %s", line)
			}
		}
	}
}

// TestRedactKeys: what the request log writes of a path hides anything
// shaped like a key.
func TestRedactKeys(t *testing.T) {
	for in, want := range map[string]string{
		"/v1/customer/get/abc":                      "/v1/customer/get/abc",
		"/v1/customer/get/sk_test_abcDEF0123456789": "/v1/customer/get/sk_test_[redacted]",
		"/x/sk_live_A/sk_test_B?":                   "/x/sk_live_[redacted]/sk_test_[redacted]?",
	} {
		if got := redactKeys(in); got != want {
			t.Errorf("redactKeys(%q) = %q, want %q", in, got, want)
		}
	}
}
