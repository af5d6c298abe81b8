// Package paystack is a client of Paystack's HTTP API (api.paystack.co):
// customers and dedicated accounts, transactions, transfer recipients and
// transfers, banks and account resolution, and the signature of the events
// Paystack sends. It follows Paystack's published API reference: JSON
// bodies, `Authorization: Bearer <secret key>`, amounts in kobo as
// integers, answers shaped {status, message, data, meta}.
//
// The client moves no money by itself and decides nothing: it reports what
// Paystack answered, and says when it cannot know (ErrUncertain).
package paystack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultBaseURL is Paystack's API.
const DefaultBaseURL = "https://api.paystack.co"

// Defaults of Config.
const (
	DefaultTimeout    = 15 * time.Second
	DefaultRetries    = 2
	DefaultBackoff    = 250 * time.Millisecond
	DefaultMaxBackoff = 4 * time.Second
)

// MaxIdleConns is how many connections to Paystack a client of its own
// keeps open between calls.
const MaxIdleConns = 64

// The operations, as Observe, logs, APIError.Op and the simulator's fault
// injection name them.
const (
	OpCreateCustomer          = "customer.create"
	OpCreateDedicatedAccount  = "dedicated_account.create"
	OpListDedicatedAccounts   = "dedicated_account.list"
	OpInitializeTransaction   = "transaction.initialize"
	OpVerifyTransaction       = "transaction.verify"
	OpListTransactions        = "transaction.list"
	OpCreateTransferRecipient = "transferrecipient.create"
	OpInitiateTransfer        = "transfer.initiate"
	OpVerifyTransfer          = "transfer.verify"
	OpListTransfers           = "transfer.list"
	OpListBanks               = "bank.list"
	OpResolveAccount          = "bank.resolve"
)

// Config configures a Client.
type Config struct {
	// BaseURL is Paystack's API (DefaultBaseURL when empty); tests point
	// it at a local simulator.
	BaseURL string
	// SecretKey is the integration's secret key (sk_test_… or sk_live_…).
	// It is sent only in the Authorization header: never logged, never in
	// an error.
	SecretKey string
	// HTTPClient sends the requests (a client of its own when nil, which
	// follows no redirect). Its own Timeout, if any, also applies.
	HTTPClient *http.Client
	// Timeout bounds each attempt (DefaultTimeout when 0).
	Timeout time.Duration
	// Retries is how many times a request safe to repeat is sent again
	// after a timeout, a lost answer, a 5xx or a 429: DefaultRetries when
	// 0, none when negative.
	Retries int
	// Backoff is the wait before the first retry (DefaultBackoff when 0);
	// it doubles for each further retry, up to MaxBackoff
	// (DefaultMaxBackoff when 0), with jitter.
	Backoff, MaxBackoff time.Duration
	// Logger receives one line per failed attempt (slog.Default() when nil).
	Logger *slog.Logger
	// Observe, when set, is called once per attempt, successful or not:
	// the operation, the HTTP status (0 when no answer was read), the
	// attempt's error (nil on success) and its duration. It is the hook
	// for metrics.
	Observe func(op string, status int, err error, d time.Duration)
}

// Client calls Paystack. It is safe for concurrent use.
type Client struct {
	base       string
	secret     string
	http       *http.Client
	timeout    time.Duration
	retries    int
	backoff    time.Duration
	maxBackoff time.Duration
	log        *slog.Logger
	observe    func(op string, status int, err error, d time.Duration)
}

// New returns a client for cfg.
func New(cfg Config) *Client {
	c := &Client{
		base:       strings.TrimRight(cfg.BaseURL, "/"),
		secret:     cfg.SecretKey,
		http:       cfg.HTTPClient,
		timeout:    cfg.Timeout,
		retries:    cfg.Retries,
		backoff:    cfg.Backoff,
		maxBackoff: cfg.MaxBackoff,
		log:        cfg.Logger,
		observe:    cfg.Observe,
	}
	if c.base == "" {
		c.base = DefaultBaseURL
	}
	if c.http == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		// Calls run side by side (an inbox worker verifies up to 16 events
		// at once, requests verify their own): keep that many connections
		// open for reuse, not the default two, or each call beyond two pays
		// a new connection and its TLS handshake.
		tr.MaxIdleConnsPerHost = MaxIdleConns
		c.http = &http.Client{
			Transport: tr,
			// A redirect is not part of Paystack's API: answer it as it came
			// rather than re-send a payment request somewhere else.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	switch {
	case c.retries == 0:
		c.retries = DefaultRetries
	case c.retries < 0:
		c.retries = 0
	}
	if c.backoff <= 0 {
		c.backoff = DefaultBackoff
	}
	if c.maxBackoff <= 0 {
		c.maxBackoff = DefaultMaxBackoff
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c
}

// call is one API request.
type call struct {
	op     string
	method string
	path   string // escaped path, from the API's root
	query  url.Values
	body   any
	// repeatable: sending the request twice has the effect of sending it
	// once (a GET, or a POST Paystack deduplicates by our reference).
	repeatable bool
}

// envelope is every Paystack answer.
type envelope struct {
	Status   bool            `json:"status"`
	Message  string          `json:"message"`
	Data     json.RawMessage `json:"data"`
	Meta     json.RawMessage `json:"meta"`
	Code     string          `json:"code"`
	Type     string          `json:"type"`
	NextStep string          // from meta.nextStep of a refusal
}

// maxAnswer bounds an answer read into memory.
const maxAnswer = 16 << 20

// do sends cl, retrying what is safe to retry, and returns the answer's
// data and meta.
func (c *Client) do(ctx context.Context, cl call) (data, meta json.RawMessage, err error) {
	var body []byte
	if cl.body != nil {
		if body, err = json.Marshal(cl.body); err != nil {
			return nil, nil, fmt.Errorf("paystack %s: encode request: %w", cl.op, err)
		}
	}
	attempts := 1
	if cl.repeatable {
		attempts += c.retries
	}
	// mayHaveActed is the first attempt of a request with effects whose
	// outcome is unknown: what later attempts answer cannot undo it.
	var mayHaveActed error
	for attempt := 1; ; attempt++ {
		env, status, retryable, err := c.attempt(ctx, cl, body)
		more := err != nil && retryable && attempt < attempts && ctx.Err() == nil
		if err != nil {
			c.log.LogAttrs(ctx, slog.LevelWarn, "paystack request failed",
				slog.String("op", cl.op), slog.Int("status", status), slog.Int("attempt", attempt),
				slog.Bool("retrying", more), slog.String("error", err.Error()))
		}
		if err == nil {
			return env.Data, env.Meta, nil
		}
		if mayHaveActed == nil && cl.method != http.MethodGet && errors.Is(err, ErrUncertain) {
			mayHaveActed = err
		}
		if !more {
			return nil, nil, settled(cl.op, mayHaveActed, err)
		}
		if werr := c.wait(ctx, attempt); werr != nil {
			return nil, nil, settled(cl.op, mayHaveActed, err)
		}
	}
}

// settled is the error of a request whose last attempt failed with last.
// When an earlier attempt may have taken effect, a later refusal or a
// later attempt that never left does not say it did not: the outcome stays
// unknown. Only a duplicate-reference refusal settles it (the first
// attempt was taken).
func settled(op string, earlier, last error) error {
	if earlier == nil || errors.Is(last, ErrUncertain) || IsDuplicateReference(last) {
		return last
	}
	return &uncertainError{op: op, cause: fmt.Errorf("an earlier attempt may have taken effect (%v), then: %s", earlier, last.Error())}
}

// wait sleeps before retry number attempt (1 for the first retry).
func (c *Client) wait(ctx context.Context, attempt int) error {
	d := c.backoff << (attempt - 1)
	if d > c.maxBackoff || d <= 0 {
		d = c.maxBackoff
	}
	// Full jitter on the upper half, so that clients retrying together spread.
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// attempt sends one request. retryable says whether the failure is one a
// repeatable request may be sent again after.
func (c *Client) attempt(ctx context.Context, cl call, body []byte) (env envelope, status int, retryable bool, err error) {
	start := time.Now()
	defer func() {
		if c.observe != nil {
			c.observe(cl.op, status, err, time.Since(start))
		}
	}()
	actx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	u := c.base + cl.path
	if len(cl.query) > 0 {
		u += "?" + cl.query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(actx, cl.method, u, rd)
	if err != nil {
		return env, 0, false, fmt.Errorf("paystack %s: %w", cl.op, scrub(err))
	}
	req.Header.Set("Authorization", "Bearer "+c.secret)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if isDialError(err) {
			return env, 0, true, &unreachableError{op: cl.op, cause: scrub(err)}
		}
		return env, 0, true, &uncertainError{op: cl.op, cause: scrub(err)}
	}
	defer resp.Body.Close()
	status = resp.StatusCode
	raw, rerr := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	derr := decodeEnvelope(raw, &env)
	switch {
	case status >= 500:
		return env, status, true, &uncertainError{op: cl.op, status: status, msg: env.Message, cause: ErrUncertain}
	case status == http.StatusTooManyRequests:
		// Refused before it was processed: safe to send again later.
		return env, status, true, c.refusal(cl.op, status, env, "Too many requests")
	case status >= 300 && status < 400:
		return env, status, false, &APIError{HTTPStatus: status, Message: "unexpected redirect", Op: cl.op}
	case status >= 400:
		return env, status, false, c.refusal(cl.op, status, env, http.StatusText(status))
	}
	// A 2xx: the request was processed; an answer that cannot be read
	// leaves its outcome unknown.
	if rerr != nil {
		return env, status, true, &uncertainError{op: cl.op, status: 0, cause: fmt.Errorf("answer %d lost while read: %w", status, scrub(rerr))}
	}
	if derr != nil {
		return env, status, true, &uncertainError{op: cl.op, cause: fmt.Errorf("answer %d not Paystack's: %w", status, derr)}
	}
	if !env.Status {
		return env, status, false, c.refusal(cl.op, status, env, "refused")
	}
	return env, status, false, nil
}

func (c *Client) refusal(op string, status int, env envelope, fallback string) *APIError {
	msg := env.Message
	if msg == "" {
		msg = fallback
	}
	return &APIError{HTTPStatus: status, Message: msg, Code: env.Code, Type: env.Type, NextStep: env.NextStep, Op: op,
		answered: env.Message != "" && !env.Status}
}

func decodeEnvelope(raw []byte, env *envelope) error {
	if err := json.Unmarshal(raw, env); err != nil {
		return err
	}
	if !env.Status && len(env.Meta) > 0 {
		var m struct {
			NextStep string `json:"nextStep"`
		}
		if json.Unmarshal(env.Meta, &m) == nil {
			env.NextStep = m.NextStep
		}
	}
	return nil
}

// isDialError reports whether err happened while opening the connection,
// before anything was sent.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// scrub drops the URL a *url.Error repeats (its query may carry an account
// number); the cause stays.
func scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
