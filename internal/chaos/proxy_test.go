package chaos

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// proxy is a small round-robin reverse proxy on loopback, standing in for
// the load balancer in front of the instances. A backend that cannot be
// reached (refused, reset, broken before it answered) is passed over for
// the next one when the request may be sent again: a GET or HEAD, or one
// with an Idempotency-Key (the service answers a repeat with the first
// execution's answer). Any other request is answered 502 then.
type proxy struct {
	srv      *http.Server
	url      string
	backends []string
	tr       *http.Transport
	next     atomic.Uint64
	// requests counts requests received; answered those a backend
	// answered; passedOver the attempts given up on a dead backend for
	// the next; unanswered those answered 502 (no backend could answer, or
	// the request could not be sent again).
	requests, answered, passedOver, unanswered atomic.Int64
	mu                                         sync.Mutex
	unansweredLog                              []string
	byBackend                                  map[string]int
}

// proxyBodyLimit bounds what the proxy buffers of a request body (the
// service's own multipart limit is 32 MB).
const proxyBodyLimit = 40 << 20

func startProxy() (*proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{url: "http://" + l.Addr().String(), byBackend: map[string]int{},
		tr: &http.Transport{MaxIdleConnsPerHost: 32, IdleConnTimeout: 30 * time.Second,
			DialContext: (&net.Dialer{Timeout: time.Second}).DialContext}}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(l) }()
	return p, nil
}

func (p *proxy) close() { _ = p.srv.Close() }

// may the request be sent again to another backend?
func resendable(r *http.Request) bool {
	return r.Method == http.MethodGet || r.Method == http.MethodHead || r.Header.Get("Idempotency-Key") != ""
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	body, err := io.ReadAll(io.LimitReader(r.Body, proxyBodyLimit+1))
	if err != nil || len(body) > proxyBodyLimit {
		http.Error(w, "proxy: body", http.StatusRequestEntityTooLarge)
		return
	}
	start := int(p.next.Add(1))
	for i := range p.backends {
		b := p.backends[(start+i)%len(p.backends)]
		out := r.Clone(r.Context())
		out.RequestURI = ""
		out.URL.Scheme, out.URL.Host = "http", b
		out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		resp, err := p.tr.RoundTrip(out)
		if err != nil {
			if r.Context().Err() != nil {
				return // the client left
			}
			if !resendable(r) {
				p.giveUp(w, r, b, err)
				return
			}
			p.passedOver.Add(1)
			continue
		}
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		resp.Body.Close()
		p.answered.Add(1)
		p.mu.Lock()
		p.byBackend[b]++
		p.mu.Unlock()
		return
	}
	p.giveUp(w, r, "every backend", nil)
}

func (p *proxy) giveUp(w http.ResponseWriter, r *http.Request, backend string, err error) {
	p.unanswered.Add(1)
	p.mu.Lock()
	if len(p.unansweredLog) < 20 {
		p.unansweredLog = append(p.unansweredLog, r.Method+" "+r.URL.Path+" at "+backend+": "+errString(err))
	}
	p.mu.Unlock()
	http.Error(w, "proxy: no backend answered", http.StatusBadGateway)
}

func errString(err error) string {
	if err == nil {
		return "unreachable"
	}
	return err.Error()
}
