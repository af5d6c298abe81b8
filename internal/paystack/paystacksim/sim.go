// Package paystacksim is a Paystack simulator: an HTTP server that answers
// the part of Paystack's API escrowd uses (customers, dedicated accounts,
// transactions, transfer recipients, transfers, banks, account resolution)
// with the paths, fields, statuses, error shapes and pagination Paystack
// documents, keeps its state in memory, and posts signed events to a
// webhook URL on this machine.
//
// It is driven from Go (PayIntoDedicatedAccount, CompleteCheckout,
// SettleTransfer, the fault injections) or, from another process, over
// HTTP under /_sim/ (see control.go). It listens on loopback only and
// delivers events to loopback only.
package paystacksim

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/escrowd/escrowd/internal/paystack"
)

// Config configures a simulator.
type Config struct {
	// SecretKey is the key requests must carry (Authorization: Bearer) and
	// events are signed with. Required.
	SecretKey string
	// WebhookURL receives the events (none are sent when empty). Its host
	// must be a loopback address or localhost.
	WebhookURL string
	// Addr is where Start listens: a loopback host and port
	// (127.0.0.1:0, a free port, when empty).
	Addr string
	// BusinessName starts every dedicated account's name
	// ("BUSINESS / FIRST LAST"); "ESCROWD SIM" when empty.
	BusinessName string
	// Balance is the integration's starting balance in kobo, which
	// transfers draw on (10,000,000,000 kobo when 0).
	Balance int64
	// SettleAfter is how long an initiated transfer stays pending before it
	// settles by itself (500ms when 0); see AutoSettleTransfers.
	SettleAfter time.Duration
	// EventAttempts bounds the deliveries of one event (5 when 0);
	// EventBackoff is the wait before the first redelivery (200ms when 0),
	// doubling after each.
	EventAttempts int
	EventBackoff  time.Duration
	// Logger receives a line per event delivery failure (discarded when nil).
	Logger *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Sim is a running simulator. It is an http.Handler; Start also serves it.
type Sim struct {
	cfg  Config
	log  *slog.Logger
	mux  *http.ServeMux
	hook *http.Client

	// URL is the simulator's base URL once started ("http://127.0.0.1:PORT").
	URL string
	srv *http.Server

	mu sync.Mutex
	st state

	ctx    context.Context
	cancel context.CancelFunc
	// busy counts background work (event deliveries, scheduled
	// settlements); idle is closed and replaced when it reaches zero.
	busyMu sync.Mutex
	busy   int
	idle   chan struct{}
	wg     sync.WaitGroup
}

// New returns a simulator that is not listening: serve it yourself (an
// httptest.Server) or use Start.
func New(cfg Config) (*Sim, error) {
	if cfg.SecretKey == "" {
		return nil, errors.New("paystacksim: a secret key is required")
	}
	if cfg.WebhookURL != "" {
		if err := checkLoopbackURL(cfg.WebhookURL); err != nil {
			return nil, fmt.Errorf("paystacksim: webhook URL: %w", err)
		}
	}
	if cfg.BusinessName == "" {
		cfg.BusinessName = "ESCROWD SIM"
	}
	if cfg.Balance == 0 {
		cfg.Balance = 10_000_000_000
	}
	if cfg.SettleAfter <= 0 {
		cfg.SettleAfter = 500 * time.Millisecond
	}
	if cfg.EventAttempts <= 0 {
		cfg.EventAttempts = 5
	}
	if cfg.EventBackoff <= 0 {
		cfg.EventBackoff = 200 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Sim{cfg: cfg, log: log, idle: make(chan struct{})}
	close(s.idle)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.st = newState(cfg)
	s.hook = loopbackClient()
	s.routes()
	return s, nil
}

// Start listens on cfg.Addr (loopback only) and serves the simulator.
func Start(cfg Config) (*Sim, error) {
	addr := cfg.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("paystacksim: listen address: %w", err)
	}
	if !loopbackHost(host) {
		return nil, fmt.Errorf("paystacksim: listen address %q is not a loopback address", addr)
	}
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("paystacksim: %w", err)
	}
	s.URL = "http://" + ln.Addr().String()
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server, the pending deliveries and settlements.
func (s *Sim) Close() error {
	s.cancel()
	var err error
	if s.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = s.srv.Shutdown(ctx)
		cancel()
		if err != nil {
			err = s.srv.Close()
		}
	}
	s.wg.Wait()
	return err
}

// WaitIdle returns once no event delivery (with its retries), no
// automatic settlement and no delayed request is pending, or when ctx
// ends.
func (s *Sim) WaitIdle(ctx context.Context) error {
	for {
		s.busyMu.Lock()
		ch, n := s.idle, s.busy
		s.busyMu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// background runs f as tracked background work.
func (s *Sim) background(f func()) {
	s.begin()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.end()
		f()
	}()
}

// begin and end bracket work WaitIdle waits for.
func (s *Sim) begin() {
	s.busyMu.Lock()
	if s.busy == 0 {
		s.idle = make(chan struct{})
	}
	s.busy++
	s.busyMu.Unlock()
}

func (s *Sim) end() {
	s.busyMu.Lock()
	s.busy--
	if s.busy == 0 {
		close(s.idle)
	}
	s.busyMu.Unlock()
}

// sleep waits d, or less when the simulator closes (false then).
func (s *Sim) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}

func (s *Sim) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// routes maps Paystack's paths, each with the operation name the client
// and the fault injection use.
func (s *Sim) routes() {
	s.mux = http.NewServeMux()
	api := map[string]struct {
		op string
		h  func(w http.ResponseWriter, r *http.Request)
	}{
		"POST /customer":                {paystack.OpCreateCustomer, s.createCustomer},
		"POST /dedicated_account":       {paystack.OpCreateDedicatedAccount, s.createDedicatedAccount},
		"GET /dedicated_account":        {paystack.OpListDedicatedAccounts, s.listDedicatedAccounts},
		"POST /transaction/initialize":  {paystack.OpInitializeTransaction, s.initializeTransaction},
		"GET /transaction/verify/{ref}": {paystack.OpVerifyTransaction, s.verifyTransaction},
		"GET /transaction":              {paystack.OpListTransactions, s.listTransactions},
		"POST /transferrecipient":       {paystack.OpCreateTransferRecipient, s.createRecipient},
		"POST /transfer":                {paystack.OpInitiateTransfer, s.initiateTransfer},
		"GET /transfer/verify/{ref}":    {paystack.OpVerifyTransfer, s.verifyTransfer},
		"GET /transfer":                 {paystack.OpListTransfers, s.listTransfers},
		"GET /bank":                     {paystack.OpListBanks, s.listBanks},
		"GET /bank/resolve":             {paystack.OpResolveAccount, s.resolveAccount},
	}
	for pattern, a := range api {
		s.mux.Handle(pattern, s.apiHandler(a.op, a.h))
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			writeError(w, http.StatusUnauthorized, "Invalid key", "", "")
			return
		}
		writeError(w, http.StatusNotFound, "Route not found", "", "")
	})
	s.controlRoutes()
}

// authorized: the request carries the secret key as a bearer token.
func (s *Sim) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	return ok && tok == s.cfg.SecretKey
}

// apiHandler checks the key, applies the faults queued for op, and runs h.
func (s *Sim) apiHandler(op string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			writeError(w, http.StatusUnauthorized, "Invalid key", "", "")
			return
		}
		f := s.takeFault(op)
		if f.delay > 0 {
			// A delayed request is pending work until it has taken effect.
			s.begin()
			defer s.end()
			if !s.sleep(f.delay) {
				return
			}
		}
		if f.failStatus != 0 {
			writeError(w, f.failStatus, failMessage(f.failStatus), "", "api_error")
			return
		}
		if !f.drop {
			h(w, r)
			return
		}
		// The request takes effect; its answer is lost with the connection.
		rec := &discardWriter{header: http.Header{}}
		h(rec, r)
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	})
}

func failMessage(status int) string {
	if status >= 500 {
		return "An error occurred while processing your request. Please try again"
	}
	if status == http.StatusTooManyRequests {
		return "Too many requests"
	}
	return http.StatusText(status)
}

// discardWriter takes the answer of a request whose answer is lost.
type discardWriter struct {
	header http.Header
	buf    bytes.Buffer
}

func (d *discardWriter) Header() http.Header         { return d.header }
func (d *discardWriter) Write(b []byte) (int, error) { return d.buf.Write(b) }
func (d *discardWriter) WriteHeader(int)             {}

// writeJSON writes a success answer {status: true, message, data[, meta]}.
func writeJSON(w http.ResponseWriter, message string, data any, meta any) {
	writeJSONStatus(w, http.StatusOK, message, data, meta)
}

// writeJSONStatus is writeJSON with another success status (201 where
// Paystack answers it).
func writeJSONStatus(w http.ResponseWriter, status int, message string, data any, meta any) {
	body := map[string]any{"status": true, "message": message, "data": data}
	if meta != nil {
		body["meta"] = meta
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// writeError writes a refusal shaped as Paystack's:
// {status: false, message[, meta.nextStep, type, code]}.
func writeError(w http.ResponseWriter, status int, message, code, typ string, nextStep ...string) {
	body := map[string]any{"status": false, "message": message}
	if code != "" {
		body["code"] = code
	}
	if typ != "" {
		body["type"] = typ
	}
	if len(nextStep) > 0 && nextStep[0] != "" {
		body["meta"] = map[string]string{"nextStep": nextStep[0]}
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// decodeBody reads a JSON request body into v (numbers kept exact).
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	dec.UseNumber()
	return dec.Decode(v)
}

// loopbackHost reports whether host is localhost or a loopback IP.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

func checkLoopbackURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q is not an http URL", raw)
	}
	if !loopbackHost(u.Hostname()) {
		return fmt.Errorf("host %q is not a loopback address: the simulator posts events on this machine only", u.Hostname())
	}
	return nil
}

// loopbackClient posts events; its dialer refuses any address that is not
// loopback, whatever a name resolved to.
func loopbackClient() *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return fmt.Errorf("paystacksim: refusing to post an event to %s: not loopback", address)
		}
		return nil
	}}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// randCode returns n random characters of a-z0-9.
func randCode(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
