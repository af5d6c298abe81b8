package chaos

import (
	"bytes"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// outcome is what a client knows about a request once it stops asking.
type outcome int

const (
	// acked: answered 2xx; it happened, once.
	acked outcome = iota
	// refused: answered 4xx; it did not happen.
	refused
	// happened: the service says it ran but its answer is gone (409
	// "executed but its response was lost", or a replayed 5xx stored
	// after the write).
	happened
	// unknown: no final answer before the client gave up (the request was
	// in flight on a killed instance, or the database was down): it may or
	// may not have happened, and must not have happened twice.
	unknown
)

func (o outcome) String() string {
	return [...]string{"acked", "refused", "happened", "unknown"}[o]
}

// call is one logical request.
type call struct {
	method, path string
	key          string // API key
	cid          string // customer-id header, if any
	body         []byte
	contentType  string // default application/json
}

// result is a request's final answer.
type result struct {
	outcome outcome
	status  int
	message string
	data    json.RawMessage
	// refusedOnRetry: the final answer was a 4xx to a retry.
	refusedOnRetry bool
}

func (r result) obj() map[string]any {
	var m map[string]any
	_ = json.Unmarshal(r.data, &m)
	return m
}

// ok: the request happened (acknowledged or known to have run).
func (r result) ok() bool { return r.outcome == acked || r.outcome == happened }

const (
	msgInProgress  = "A request with this idempotency key is in progress"
	msgOutcomeLost = "A request with this idempotency key was executed but its response was lost; read the resource to see the outcome"
)

// client sends requests to the API instances, each attempt to a random
// one, and retries what has no final answer (a timeout, a refused or
// broken connection, a 5xx, 429, or 409 in progress) with the same
// Idempotency-Key until retryFor has passed.
type client struct {
	addrs    []string
	http     *http.Client
	retryFor time.Duration
	// sent counts HTTP requests (attempts); retried counts attempts
	// repeated after a timeout or a broken connection.
	sent, timeouts, retried, acks atomic.Int64
	// gaveUp counts requests left unknown after retryFor; gaveUpBusy those
	// of them whose last answer was 409 in progress (the key held by an
	// attempt that died with its instance, until the takeover).
	gaveUp, gaveUpBusy atomic.Int64
}

func newClient(addrs []string, timeout, retryFor time.Duration) *client {
	tr := &http.Transport{MaxIdleConnsPerHost: 32, IdleConnTimeout: 30 * time.Second,
		DialContext: (&net.Dialer{Timeout: time.Second}).DialContext}
	return &client{addrs: addrs, http: &http.Client{Transport: tr, Timeout: timeout}, retryFor: retryFor}
}

func newKey() string {
	b := make([]byte, 16)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}

func jsonBody(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func (c *client) do(rng *rand.Rand, cl call) result {
	idem := ""
	if cl.method != http.MethodGet {
		idem = newKey()
	}
	deadline := time.Now().Add(c.retryFor)
	retried := false
	for {
		st, msg, data, replayed, err := c.attempt(rng, cl, idem)
		final := true
		switch {
		case err != nil:
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.timeouts.Add(1)
			}
			final = false
		case st >= 200 && st < 300:
			c.acks.Add(1)
			return result{outcome: acked, status: st, message: msg, data: data}
		case st == http.StatusConflict && msg == msgOutcomeLost:
			return result{outcome: happened, status: st, message: msg}
		case st >= 500 && replayed:
			// A 5xx stored after the write: it happened.
			return result{outcome: happened, status: st, message: msg}
		case st == http.StatusConflict && msg == msgInProgress:
			// The first attempt still holds the key (or died holding it:
			// a takeover needs 2 minutes); no point asking often.
			final = false
			time.Sleep(time.Second)
		case st >= 500, st == http.StatusTooManyRequests:
			final = false
		default:
			if retried {
				// Refused after an attempt without answer: that attempt
				// may have run (an unkeyed claim; or a keyed request whose
				// first attempt's commit outcome the server did not know,
				// so it released the key and the retry ran again).
				return result{outcome: unknown, status: st, message: msg, data: data, refusedOnRetry: true}
			}
			return result{outcome: refused, status: st, message: msg, data: data}
		}
		if !final {
			retried = true
			if time.Now().After(deadline) {
				c.gaveUp.Add(1)
				if st == http.StatusConflict && msg == msgInProgress {
					c.gaveUpBusy.Add(1)
				}
				return result{outcome: unknown, status: st, message: msg}
			}
			c.retried.Add(1)
			time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond)
		}
	}
}

func (c *client) attempt(rng *rand.Rand, cl call, idem string) (status int, msg string, data json.RawMessage, replayed bool, err error) {
	addr := c.addrs[rng.IntN(len(c.addrs))]
	var body io.Reader
	if cl.body != nil {
		body = bytes.NewReader(cl.body)
	}
	req, err := http.NewRequest(cl.method, "http://"+addr+cl.path, body)
	if err != nil {
		return 0, "", nil, false, err
	}
	req.Header.Set("Authorization", "Bearer "+cl.key)
	if cl.body != nil {
		ct := cl.contentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	if cl.cid != "" {
		req.Header.Set("customer-id", cl.cid)
	}
	if idem != "" {
		req.Header.Set("Idempotency-Key", idem)
	}
	c.sent.Add(1)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, "", nil, false, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", nil, false, err
	}
	var env struct {
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	}
	_ = json.Unmarshal(raw, &env)
	return resp.StatusCode, env.Message, env.Data, resp.Header.Get("Idempotency-Replayed") == "true", nil
}
