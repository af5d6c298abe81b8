package paystack

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const testSecret = "sk_test_0123456789abcdef0123456789abcdef01234567"

// newTestClient is a client of srv that retries fast.
func newTestClient(t *testing.T, srv *httptest.Server, mod func(*Config)) *Client {
	t.Helper()
	cfg := Config{BaseURL: srv.URL, SecretKey: testSecret, Backoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)}
	if mod != nil {
		mod(&cfg)
	}
	return New(cfg)
}

// RFC 4231, test case 2: HMAC-SHA-512 with key "Jefe".
func TestSignKnownVector(t *testing.T) {
	const want = "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737"
	body := []byte("what do ya want for nothing?")
	if got := Sign("Jefe", body); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
	if !VerifySignature("Jefe", body, want) {
		t.Fatal("the known signature does not verify")
	}
	for name, c := range map[string]struct {
		secret, header string
		body           []byte
	}{
		"body changed": {"Jefe", want, []byte("what do ya want for nothing!")},
		"other key":    {"jefe", want, body},
		"empty secret": {"", Sign("", body), body},
		"not hex":      {"Jefe", "zz" + want[2:], body},
		"truncated":    {"Jefe", want[:64], body},
		"no header":    {"Jefe", "", body},
	} {
		if VerifySignature(c.secret, c.body, c.header) {
			t.Errorf("%s: verifies", name)
		}
	}
}

func TestRequestShape(t *testing.T) {
	var got *http.Request
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, body = r, must(io.ReadAll(r.Body))
		_, _ = io.WriteString(w, `{"status":true,"message":"Transfer has been queued","data":{"reference":"esc_0123456789abcdef","status":"pending","amount":150000,"recipient":56824902,"transfer_code":"TRF_x","id":7}}`)
	}))
	defer srv.Close()
	c := newTestClient(t, srv, nil)
	tr, err := c.InitiateTransfer(context.Background(), TransferRequest{Amount: 150000, Recipient: "RCP_gd9vgag7n5lr5ix",
		Reference: "esc_0123456789abcdef", Reason: "withdrawal"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Method != http.MethodPost || got.URL.Path != "/transfer" {
		t.Errorf("request %s %s", got.Method, got.URL.Path)
	}
	if h := got.Header.Get("Authorization"); h != "Bearer "+testSecret {
		t.Errorf("Authorization %q", h)
	}
	if ct := got.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	const wantBody = `{"source":"balance","amount":150000,"recipient":"RCP_gd9vgag7n5lr5ix","reference":"esc_0123456789abcdef","reason":"withdrawal"}`
	if string(body) != wantBody {
		t.Errorf("body %s\nwant %s", body, wantBody)
	}
	if tr.Recipient.ID != 56824902 || tr.Status != TransferPending || tr.Amount != 150000 {
		t.Errorf("transfer %+v", tr)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// The secret key is never in an error's text nor in a log line, whatever
// Paystack answers.
func TestSecretNeverLoggedNorInErrors(t *testing.T) {
	answers := []func(w http.ResponseWriter){
		func(w http.ResponseWriter) {
			w.WriteHeader(401)
			_, _ = io.WriteString(w, `{"status":false,"message":"Invalid key"}`)
		},
		func(w http.ResponseWriter) { w.WriteHeader(502); _, _ = io.WriteString(w, `<html>bad gateway</html>`) },
		func(w http.ResponseWriter) { _, _ = io.WriteString(w, `{"status":true,"data":`) },
		func(w http.ResponseWriter) {
			w.WriteHeader(400)
			_, _ = io.WriteString(w, `{"status":false,"message":"Recipient specified is invalid","code":"invalid_transfer_recipient","type":"validation_error","meta":{"nextStep":"Provide a valid recipient"}}`)
		},
	}
	for i, answer := range answers {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { answer(w) }))
		var logs bytes.Buffer
		c := newTestClient(t, srv, func(cfg *Config) { cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
		_, err := c.InitiateTransfer(context.Background(), TransferRequest{Amount: 100, Recipient: "RCP_x", Reference: "esc_0123456789abcdef"})
		srv.Close()
		if err == nil {
			t.Fatalf("answer %d: no error", i)
		}
		if strings.Contains(err.Error(), testSecret) || strings.Contains(logs.String(), testSecret) {
			t.Fatalf("answer %d: the secret key leaked: %v\n%s", i, err, logs.String())
		}
		if logs.Len() == 0 {
			t.Errorf("answer %d: no log line for a provider error", i)
		}
	}
}

func TestRefusalIsAnAPIError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(400)
		_, _ = io.WriteString(w, `{"status":false,"message":"Recipient specified is invalid","code":"invalid_transfer_recipient","type":"validation_error","meta":{"nextStep":"Provide a valid recipient"}}`)
	}))
	defer srv.Close()
	var calls atomic.Int32
	c := newTestClient(t, srv, func(cfg *Config) {
		cfg.Observe = func(op string, status int, err error, d time.Duration) {
			calls.Add(1)
			if op != OpInitiateTransfer || status != 400 || err == nil {
				t.Errorf("Observe(%q, %d, %v)", op, status, err)
			}
		}
	})
	_, err := c.InitiateTransfer(context.Background(), TransferRequest{Amount: 100, Recipient: "RCP_x", Reference: "esc_0123456789abcdef"})
	var ae *APIError
	if !errors.As(err, &ae) || ae.HTTPStatus != 400 || ae.Code != "invalid_transfer_recipient" || ae.Type != "validation_error" ||
		ae.NextStep != "Provide a valid recipient" || ae.Op != OpInitiateTransfer {
		t.Fatalf("err %#v", err)
	}
	if errors.Is(err, ErrUncertain) || IsDuplicateReference(err) {
		t.Fatalf("a refusal read as uncertain or duplicate: %v", err)
	}
	if calls.Load() != 1 {
		t.Fatalf("a refusal was sent %d times, want once", calls.Load())
	}
}

// A 5xx is uncertain and retried only where repeating is harmless.
func TestRetriesOnlyWhatIsSafeToRepeat(t *testing.T) {
	var mu sync.Mutex
	hits := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.Method+" "+r.URL.Path]++
		mu.Unlock()
		w.WriteHeader(503)
		_, _ = io.WriteString(w, `{"status":false,"message":"Service unavailable"}`)
	}))
	defer srv.Close()
	c := newTestClient(t, srv, func(cfg *Config) { cfg.Retries = 3 })
	ctx := context.Background()
	_, err1 := c.CreateCustomer(ctx, CustomerRequest{Email: "a@example.com"})
	_, err2 := c.CreateTransferRecipient(ctx, RecipientRequest{Name: "A", AccountNumber: "0123456789", BankCode: "058"})
	_, err3 := c.InitializeTransaction(ctx, InitializeRequest{Email: "a@example.com", Amount: 5000})
	_, err4 := c.InitializeTransaction(ctx, InitializeRequest{Email: "a@example.com", Amount: 5000, Reference: "ref-1"})
	_, err5 := c.InitiateTransfer(ctx, TransferRequest{Amount: 100, Recipient: "RCP_x", Reference: "esc_0123456789abcdef"})
	_, err6 := c.VerifyTransfer(ctx, "esc_0123456789abcdef")
	for i, err := range []error{err1, err2, err3, err4, err5, err6} {
		if !errors.Is(err, ErrUncertain) {
			t.Errorf("call %d: %v is not uncertain", i+1, err)
		}
	}
	want := map[string]int{
		"POST /customer": 1, "POST /transferrecipient": 1,
		"POST /transaction/initialize": 1 + 4, // once without a reference, four times with one
		"POST /transfer":               4, "GET /transfer/verify/esc_0123456789abcdef": 4,
	}
	for k, n := range want {
		if hits[k] != n {
			t.Errorf("%s sent %d times, want %d", k, hits[k], n)
		}
	}
}

func TestTimeoutIsUncertain(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	c := newTestClient(t, srv, func(cfg *Config) { cfg.Timeout = 20 * time.Millisecond; cfg.Retries = -1 })
	_, err := c.InitiateTransfer(context.Background(), TransferRequest{Amount: 100, Recipient: "RCP_x", Reference: "esc_0123456789abcdef"})
	if !errors.Is(err, ErrUncertain) || errors.Is(err, ErrUnreachable) {
		t.Fatalf("err %v, want uncertain", err)
	}
}

func TestClosedPortIsUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	c := New(Config{BaseURL: "http://" + addr, SecretKey: testSecret, Retries: -1, Logger: slog.New(slog.DiscardHandler)})
	_, err = c.InitiateTransfer(context.Background(), TransferRequest{Amount: 100, Recipient: "RCP_x", Reference: "esc_0123456789abcdef"})
	if !errors.Is(err, ErrUnreachable) || errors.Is(err, ErrUncertain) {
		t.Fatalf("err %v, want unreachable and not uncertain", err)
	}
}

// A 2xx Paystack sent but that cannot be read leaves the outcome unknown.
func TestUnreadableSuccessIsUncertain(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"status":true,"message":"Transfer has been queued","data":{"amount":"12.5"}}`)
	}))
	defer srv.Close()
	c := newTestClient(t, srv, func(cfg *Config) { cfg.Retries = -1 })
	_, err := c.InitiateTransfer(context.Background(), TransferRequest{Amount: 100, Recipient: "RCP_x", Reference: "esc_0123456789abcdef"})
	if !errors.Is(err, ErrUncertain) {
		t.Fatalf("err %v, want uncertain", err)
	}
}

func TestIsDuplicateReference(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&APIError{HTTPStatus: 400, Message: "Duplicate Transfer Reference"}, true},
		{&APIError{HTTPStatus: 400, Message: "Transfer reference already exists"}, true},
		{&APIError{HTTPStatus: 400, Message: "x", Code: "duplicate_reference"}, true},
		{&APIError{HTTPStatus: 409, Message: "This reference has already been used on a prior transfer"}, true},
		{&APIError{HTTPStatus: 400, Message: "Recipient specified is invalid"}, false},
		{&APIError{HTTPStatus: 500, Message: "Duplicate Transfer Reference"}, false},
		{&uncertainError{op: OpInitiateTransfer, cause: errors.New("duplicate reference")}, false},
		{nil, false},
	} {
		if got := IsDuplicateReference(c.err); got != c.want {
			t.Errorf("IsDuplicateReference(%v) = %v", c.err, got)
		}
	}
}

// Only Paystack's own answer that a reference is unknown is "not found":
// a bare 404 from something else says nothing about the transfer.
func TestNotFoundNeedsPaystacksAnswer(t *testing.T) {
	for body, want := range map[string]bool{
		`{"status":false,"message":"Transfer not found"}`: true,
		`<html><body>404 page not found</body></html>`:    false,
		``: false,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, body)
		}))
		_, err := newTestClient(t, srv, nil).VerifyTransfer(context.Background(), "esc_0123456789abcdef")
		srv.Close()
		if got := IsNotFound(err); got != want {
			t.Errorf("404 %q: IsNotFound = %v (%v)", body, got, err)
		}
	}
}

// Once an attempt of a transfer may have taken effect, a later refusal or
// a later attempt that could not connect leaves the outcome unknown; a
// duplicate-reference refusal is the exception: it says the first was
// taken.
func TestEarlierUncertaintyStands(t *testing.T) {
	for name, c := range map[string]struct {
		second    func(w http.ResponseWriter)
		uncertain bool
		duplicate bool
	}{
		"refused": {func(w http.ResponseWriter) {
			w.WriteHeader(400)
			_, _ = io.WriteString(w, `{"status":false,"message":"Your balance is not enough to fulfil this request","code":"insufficient_balance"}`)
		}, true, false},
		"duplicate": {func(w http.ResponseWriter) {
			w.WriteHeader(400)
			_, _ = io.WriteString(w, `{"status":false,"message":"Duplicate Transfer Reference","code":"duplicate_reference"}`)
		}, false, true},
	} {
		var n atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				w.WriteHeader(http.StatusGatewayTimeout)
				return
			}
			c.second(w)
		}))
		_, err := newTestClient(t, srv, nil).InitiateTransfer(context.Background(),
			TransferRequest{Amount: 100, Recipient: "RCP_x", Reference: "esc_0123456789abcdef"})
		srv.Close()
		var ae *APIError
		if errors.Is(err, ErrUncertain) != c.uncertain || IsDuplicateReference(err) != c.duplicate ||
			(c.uncertain && errors.As(err, &ae)) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Calls made side by side reuse their connections: a second round of as
// many calls at once as the first opens none (a transport keeping two
// idle connections opens one per call beyond two).
func TestConcurrentCallsReuseConnections(t *testing.T) {
	const calls = 16
	var opened atomic.Int64
	var mu sync.Mutex
	arrived := 0
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Each round's calls are all in flight at once before any answer.
		mu.Lock()
		arrived++
		round := release
		if arrived%calls == 0 {
			close(release)
			release = make(chan struct{})
		}
		mu.Unlock()
		<-round
		_, _ = io.WriteString(w, `{"status":true,"message":"Transfer retrieved","data":{"reference":"esc_0123456789abcdef","status":"success","amount":150000,"transfer_code":"TRF_x","id":7}}`)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c := newTestClient(t, srv, nil)
	for round := range 2 {
		var wg sync.WaitGroup
		errs := make(chan error, calls)
		for range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.VerifyTransfer(context.Background(), "esc_0123456789abcdef"); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if n := opened.Load(); n != calls {
			t.Fatalf("after round %d, %d connections opened for %d calls at once", round+1, n, calls)
		}
	}
}
