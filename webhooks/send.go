// Sending one attempt: the endpoint lookup, the signed POST and its verdict.

package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
)

// NewClient is the HTTP client of deliveries: no proxy, no redirects (a 3xx
// is not a delivery), keep-alive connections for up to conns attempts, and
// with guard a dialer that refuses non-public addresses after resolution.
func NewClient(conns int, guard bool) *http.Client {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	if guard {
		dialer.Control = guardedControl
	}
	tr := &http.Transport{
		DialContext:           dialer.DialContext,
		MaxIdleConns:          2 * conns,
		MaxIdleConnsPerHost:   conns,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
}

type endpointKey struct {
	merchantID string
	env        domain.Environment
}

// endpointResult is an endpoint or why it could not be looked up.
type endpointResult struct {
	ep  Endpoint
	err error
}

// endpoints looks up each merchant and environment of a leased batch once,
// concurrently.
func (d *Dispatcher) endpoints(ctx context.Context, cs []leasedAttempt) map[endpointKey]endpointResult {
	var keys []endpointKey
	seen := map[endpointKey]bool{}
	for _, c := range cs {
		if k := (endpointKey{c.MerchantID, c.Environment}); !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	results := make([]endpointResult, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ep, err := d.Endpoints.Endpoint(ctx, k.merchantID, k.env)
			results[i] = endpointResult{ep, err}
		}()
	}
	wg.Wait()
	out := make(map[endpointKey]endpointResult, len(keys))
	for i, k := range keys {
		out[k] = results[i]
	}
	return out
}

// attempt makes one delivery attempt; ok is false when ctx ended first
// (the dispatcher is stopping: the attempt is abandoned, not judged).
func (d *Dispatcher) attempt(ctx context.Context, c leasedAttempt, ep endpointResult) (outcome, bool) {
	o := outcome{ID: c.ID, Attempt: c.Attempt, At: d.Now()}
	if ep.err != nil {
		if ctx.Err() != nil {
			return o, false
		}
		// Counted like a sent attempt: a lookup that keeps failing must go
		// through the schedule to failed, visibly, not loop unseen. The
		// merchant sees a plain message; the cause goes to the log.
		d.Log.Error("webhooks: endpoint lookup failed", zap.String("merchant_id", c.MerchantID), zap.Error(ep.err))
		o.Sent = true
		return d.judge(o, 0, errEndpointLookup), true
	}
	if ep.ep.URL == "" {
		msg := "No callback URL is set for this environment"
		o.Status, o.Err = StatusNoEndpoint, &msg
		return o, true
	}
	o.Sent = true
	code, err := d.send(ctx, c, ep.ep)
	o.Took = d.Now().Sub(o.At)
	if err != nil && code == 0 && ctx.Err() != nil {
		return o, false
	}
	return d.judge(o, code, err), true
}

// judge turns a response into the outcome: 2xx is delivered, anything else
// is retried after the schedule's next pause, or failed past its end.
func (d *Dispatcher) judge(o outcome, code int, err error) outcome {
	if code != 0 {
		c := int32(code)
		o.Code = &c
	}
	if err == nil && code >= 200 && code < 300 {
		o.Status = StatusDelivered
		return o
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	} else {
		msg = "HTTP " + strconv.Itoa(code)
	}
	o.Err = &msg
	if delay, ok := NextDelay(d.Schedule, o.Attempt, d.Rand()); ok {
		o.Status, o.Delay = StatusPending, delay
	} else {
		o.Status = StatusFailed
	}
	return o
}

// errEndpointLookup is the logged error of an attempt whose callback URL
// and secret could not be read.
var errEndpointLookup = errors.New("the callback endpoint could not be looked up")

// maxErrorBody is how much of a failing response is kept in the log.
const maxErrorBody = 256

func (d *Dispatcher) send(ctx context.Context, c leasedAttempt, ep Endpoint) (int, error) {
	u, err := url.Parse(ep.URL)
	if err != nil {
		return 0, errors.New("callback URL is invalid")
	}
	client := d.Client
	if c.Environment == domain.Live {
		if u.Scheme != "https" {
			return 0, errors.New("a live callback URL must use https")
		}
		client = d.LiveClient
	}
	body, err := OpenBody(ctx, d.Sealer, c.ID, c.Body)
	if err != nil {
		return 0, fmt.Errorf("the message could not be opened: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, ep.URL, bytes.NewReader(body))
	if err != nil {
		return 0, errors.New("callback URL is invalid")
	}
	req.Header.Set("Content-Type", "application/json")
	headers, userAgent := conventions(ep.Profile, d.SignatureHeaders, d.UserAgent)
	req.Header.Set("User-Agent", userAgent)
	sig := signatures(ep, body, d.Now())
	for _, name := range headers {
		req.Header.Set(name, sig)
	}
	req.Header.Set(AttemptHeader, strconv.Itoa(c.Attempt))
	res, err := client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(rctx.Err(), context.DeadlineExceeded) {
			return 0, fmt.Errorf("no response within %s", d.Timeout)
		}
		if errors.Is(err, ErrBlockedAddress) {
			return 0, ErrBlockedAddress
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			return 0, ue.Err
		}
		return 0, err
	}
	defer res.Body.Close()
	if res.StatusCode >= 200 && res.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
		return res.StatusCode, nil
	}
	snippet, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if len(bytes.TrimSpace(snippet)) > 0 {
		return res.StatusCode, fmt.Errorf("HTTP %d: %s", res.StatusCode, bytes.TrimSpace(snippet))
	}
	return res.StatusCode, fmt.Errorf("HTTP %d", res.StatusCode)
}
