package httpapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// idemWrite steers the /v1/write handler of an idemEnv.
type idemWrite struct {
	before func(call int64)         // runs before the append
	result chan error               // receives the append's error
	after  func(echo.Context) error // answers instead of 201
}

type thingHappened struct {
	Call int64 `json:"call"`
}

func (thingHappened) EventType() string { return "thing.happened" }

var thingKind = app.Kind[int]{Name: "thing", Registry: domain.NewRegistry(func() domain.Event { return &thingHappened{} }),
	Apply: func(n int, _ domain.Event) int { return n + 1 }}

// things counts the events of stream "thing-<id>".
func (env *idemEnv) things(id string) int {
	env.t.Helper()
	evs, err := env.store.ReadStream(context.Background(), thingKind.StreamName(id), 0, 0)
	if err != nil {
		env.t.Fatal(err)
	}
	return len(evs)
}

// errIdemUnprocessable stands for a domain error the app's error handler
// maps to a 4xx: not an *echo.HTTPError, yet a stored outcome.
var errIdemUnprocessable = errors.New("unprocessable")

type idemEnv struct {
	t     *testing.T
	e     *echo.Echo
	pool  *pgxpool.Pool
	store eventstore.Store
	// write steers /v1/write: what it does before and after its append.
	write   idemWrite
	now     atomic.Int64 // unix nanoseconds
	calls   atomic.Int64
	fails   atomic.Int64 // /v1/flaky fails while > 0
	reqID   atomic.Int64
	entered chan struct{}
	release chan struct{}
	gates   sync.Map // call number -> chan int, see gate
	// afterFence, if set, runs once a takeover has fenced a reservation, before
	// it stores anything.
	afterFence func()
	// loseAnswer makes the engine's next append commit and then fail, as
	// when the connection breaks during COMMIT.
	loseAnswer atomic.Bool
}

// answerLosingStore commits an append and then, when its env says so,
// reports an error that does not say whether it committed.
type answerLosingStore struct {
	eventstore.Store
	env *idemEnv
}

func (s answerLosingStore) Append(ctx context.Context, appends ...eventstore.StreamAppend) (eventstore.AppendResult, error) {
	res, err := s.Store.Append(ctx, appends...)
	if err == nil && s.env.loseAnswer.CompareAndSwap(true, false) {
		return eventstore.AppendResult{}, errors.New("unexpected EOF during COMMIT")
	}
	return res, err
}

// hookedFencer is the engine's fence, then the env's afterFence.
type hookedFencer struct {
	*app.Engine
	env *idemEnv
}

func (f hookedFencer) FenceReservation(ctx context.Context, owner []byte, keyID, key string, meta domain.Meta) (bool, error) {
	wrote, err := f.Engine.FenceReservation(ctx, owner, keyID, key, meta)
	if f.env.afterFence != nil {
		f.env.afterFence()
	}
	return wrote, err
}

// gate is the channel through which /v1/gated call n is told its status.
func (env *idemEnv) gate(n int64) chan int {
	ch, _ := env.gates.LoadOrStore(n, make(chan int, 1))
	return ch.(chan int)
}

func newIdemEnv(t *testing.T, opts ...IdempotencyOption) *idemEnv {
	t.Helper()
	env := &idemEnv{t: t, pool: pgtest.NewPool(t), entered: make(chan struct{}, 16), release: make(chan struct{})}
	env.now.Store(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	env.store = postgres.New(env.pool)
	t.Cleanup(env.store.Close)
	engine := app.NewEngine(answerLosingStore{env.store, env}, 100)
	store := NewIdempotencyStore(env.pool, append([]IdempotencyOption{WithIdempotencyFence(hookedFencer{engine, env}),
		WithIdempotencyClock(func() time.Time { return time.Unix(0, env.now.Load()).UTC() })}, opts...)...)

	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		var de *domain.Error
		if errors.As(err, &de) {
			_ = c.JSON(statusOf(de.Code), map[string]any{"status": statusOf(de.Code), "message": de.Message})
			return
		}
		if errors.Is(err, errIdemUnprocessable) {
			_ = c.JSON(http.StatusUnprocessableEntity, map[string]any{"status": 422, "message": "no", "data": map[string]any{}})
			return
		}
		e.DefaultHTTPErrorHandler(err, c)
	}
	// Outer middleware: a per-request header that must never be replayed,
	// the route's body limit, then "auth" from a test header.
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.Response().Header().Set("X-Request-Id", strconv.FormatInt(env.reqID.Add(1), 10))
			c.Request().Body = http.MaxBytesReader(c.Response(), c.Request().Body, 1<<10)
			if k := c.Request().Header.Get("X-Test-Key"); k != "" {
				c.Set("principal", Principal{KeyID: k, MerchantID: "m_" + k})
			}
			return next(c)
		}
	}, store.Middleware())

	e.POST("/v1/things", func(c echo.Context) error {
		n := env.calls.Add(1)
		b, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		c.Response().Header().Set("X-Call", strconv.FormatInt(n, 10))
		return c.JSON(http.StatusCreated, map[string]any{"call": n, "body": string(b)})
	})
	e.GET("/v1/things", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]any{"call": env.calls.Add(1)})
	})
	e.PUT("/v1/form", func(c echo.Context) error {
		n := env.calls.Add(1)
		if _, _, err := c.Request().FormFile("file"); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string]any{"call": n, "name": c.FormValue("name")})
	})
	e.POST("/v1/flaky", func(c echo.Context) error {
		n := env.calls.Add(1)
		if env.fails.Add(-1) >= 0 {
			return echo.NewHTTPError(http.StatusServiceUnavailable, "try later")
		}
		return c.JSON(http.StatusCreated, map[string]any{"call": n})
	})
	e.POST("/v1/broken", func(c echo.Context) error {
		n := env.calls.Add(1)
		if n == 1 {
			return errors.New("database on fire") // non-HTTP error: a 500
		}
		return c.JSON(http.StatusCreated, map[string]any{"call": n})
	})
	e.POST("/v1/invalid", func(c echo.Context) error {
		env.calls.Add(1)
		return echo.NewHTTPError(http.StatusBadRequest, "amount must be an integer of at least 1000")
	})
	e.POST("/v1/domain", func(c echo.Context) error {
		env.calls.Add(1)
		return errIdemUnprocessable
	})
	e.POST("/v1/slow", func(c echo.Context) error {
		n := env.calls.Add(1)
		env.entered <- struct{}{}
		<-env.release
		return c.JSON(http.StatusCreated, map[string]any{"call": n})
	})
	// /v1/write appends one event to stream "thing-<body>" through the
	// engine, as every money-moving command does.
	e.POST("/v1/write", func(c echo.Context) error {
		n := env.calls.Add(1)
		b, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		w := env.write
		if w.before != nil {
			w.before(n)
		}
		_, err = engine.Do(c.Request().Context(), domain.Meta{}, func(tx *app.Tx) error {
			app.Append(tx, thingKind, string(b), thingHappened{Call: n})
			return nil
		})
		if w.result != nil {
			w.result <- err
		}
		if err != nil {
			return err
		}
		if w.after != nil {
			return w.after(c)
		}
		return c.JSON(http.StatusCreated, map[string]any{"call": n})
	})
	// /v1/gated waits for its own gate (by call number) and answers with
	// the status sent through it.
	e.POST("/v1/gated", func(c echo.Context) error {
		n := env.calls.Add(1)
		env.entered <- struct{}{}
		status := <-env.gate(n)
		return c.JSON(status, map[string]any{"call": n})
	})
	e.DELETE("/v1/panic", func(c echo.Context) error {
		env.calls.Add(1)
		panic("boom")
	})
	env.e = e
	return env
}

func (env *idemEnv) advance(d time.Duration) { env.now.Add(int64(d)) }

func (env *idemEnv) do(method, path, apiKey, idemKey, contentType, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if apiKey != "" {
		req.Header.Set("X-Test-Key", apiKey)
	}
	if idemKey != "" {
		req.Header.Set(headerIdempotencyKey, idemKey)
	}
	if contentType != "" {
		req.Header.Set(echo.HeaderContentType, contentType)
	}
	rec := httptest.NewRecorder()
	env.e.ServeHTTP(rec, req)
	return rec
}

func (env *idemEnv) post(path, apiKey, idemKey, body string) *httptest.ResponseRecorder {
	return env.do(http.MethodPost, path, apiKey, idemKey, echo.MIMEApplicationJSON, body)
}

func idemWantStatus(t *testing.T, rec *httptest.ResponseRecorder, code int) {
	t.Helper()
	if rec.Code != code {
		t.Fatalf("status %d, want %d (body %s)", rec.Code, code, rec.Body)
	}
}

func idemWantReplayOf(t *testing.T, got, first *httptest.ResponseRecorder) {
	t.Helper()
	if got.Code != first.Code {
		t.Fatalf("replay status %d, first %d", got.Code, first.Code)
	}
	if !bytes.Equal(got.Body.Bytes(), first.Body.Bytes()) {
		t.Fatalf("replay body %q, first %q", got.Body, first.Body)
	}
	if got.Header().Get(headerIdempotencyReplayed) != "true" {
		t.Fatalf("replay lacks %s: %v", headerIdempotencyReplayed, got.Header())
	}
	if a, b := got.Header().Get("Content-Type"), first.Header().Get("Content-Type"); a != b {
		t.Fatalf("replay Content-Type %q, first %q", a, b)
	}
}

func TestIdempotencyReplaysByteForByte(t *testing.T) {
	env := newIdemEnv(t)
	body := `{"amount":5000}`
	first := env.post("/v1/things", "key1", "abc", body)
	idemWantStatus(t, first, http.StatusCreated)
	if first.Header().Get(headerIdempotencyReplayed) != "" {
		t.Fatal("first response marked as replayed")
	}
	if !strings.Contains(first.Body.String(), `"body":"{\"amount\":5000}"`) {
		t.Fatalf("handler did not see the body: %s", first.Body)
	}
	second := env.post("/v1/things", "key1", "abc", body)
	idemWantReplayOf(t, second, first)
	if got := second.Header().Get("X-Call"); got != "1" {
		t.Fatalf("handler header X-Call = %q, want the stored 1", got)
	}
	if a, b := first.Header().Get("X-Request-Id"), second.Header().Get("X-Request-Id"); a == b {
		t.Fatalf("outer middleware header replayed: %q", b)
	}
	if n := env.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
}

func TestIdempotencyDifferentRequestConflicts(t *testing.T) {
	env := newIdemEnv(t)
	idemWantStatus(t, env.post("/v1/things", "key1", "abc", `{"amount":5000}`), http.StatusCreated)
	rec := env.post("/v1/things", "key1", "abc", `{"amount":6000}`)
	idemWantStatus(t, rec, http.StatusConflict)
	want := `{"status":409,"message":"Idempotency key reused with a different request","data":{}}`
	if got := strings.TrimSpace(rec.Body.String()); got != want {
		t.Fatalf("body %s, want %s", got, want)
	}
	// Same body on another path is another request too.
	idemWantStatus(t, env.do(http.MethodPost, "/v1/invalid", "key1", "abc", echo.MIMEApplicationJSON, `{"amount":5000}`), http.StatusConflict)
	if n := env.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
}

func TestIdempotencyInFlight(t *testing.T) {
	env := newIdemEnv(t)
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- env.post("/v1/slow", "key1", "slow", `{}`) }()
	<-env.entered

	rec := env.post("/v1/slow", "key1", "slow", `{}`)
	idemWantStatus(t, rec, http.StatusConflict)
	want := `{"status":409,"message":"A request with this idempotency key is in progress","data":{}}`
	if got := strings.TrimSpace(rec.Body.String()); got != want {
		t.Fatalf("body %s, want %s", got, want)
	}
	idemWantStatus(t, env.post("/v1/slow", "key1", "slow", `{"other":1}`), http.StatusConflict)

	close(env.release)
	first := <-done
	idemWantStatus(t, first, http.StatusCreated)
	idemWantReplayOf(t, env.post("/v1/slow", "key1", "slow", `{}`), first)
	if n := env.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
}

// TestIdempotencyRunningReservationIsRenewed: a request that works longer
// than the abandonment delay renews its reservation while it runs, so a
// retry of it finds it in progress (409) rather than taking it over and
// running it a second time.
func TestIdempotencyRunningReservationIsRenewed(t *testing.T) {
	env := newIdemEnv(t, WithIdempotencyHeartbeat(5*time.Millisecond))
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- env.post("/v1/slow", "key1", "k", `{}`) }()
	<-env.entered
	env.advance(idempotencyAbandonAfter + time.Second)
	// Wait for a renewal at the advanced clock (a while at most: without
	// one the retry below shows what follows).
	for range 2000 {
		var renewed time.Time
		if err := env.pool.QueryRow(context.Background(), `SELECT created_at FROM http_idempotency_keys WHERE idempotency_key = 'k'`).
			Scan(&renewed); err != nil {
			t.Fatal(err)
		}
		if !renewed.Before(time.Unix(0, env.now.Load())) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	retry := make(chan *httptest.ResponseRecorder, 1)
	go func() { retry <- env.post("/v1/slow", "key1", "k", `{}`) }()
	select {
	case r := <-retry:
		idemWantStatus(t, r, http.StatusConflict)
	case <-env.entered:
		t.Fatal("a retry took a running request's reservation over and ran it again")
	}
	env.release <- struct{}{}
	idemWantStatus(t, <-done, http.StatusCreated)
	if n := env.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
}

func TestIdempotencyAbandonedReservationIsTakenOver(t *testing.T) {
	env := newIdemEnv(t)
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- env.post("/v1/slow", "key1", "k", `{}`) }()
	<-env.entered

	env.advance(idempotencyAbandonAfter + time.Second)
	// A different request may not take an abandoned key over. Were it to,
	// it would run the handler (and wait there): fail on that at once.
	other := make(chan *httptest.ResponseRecorder, 1)
	go func() { other <- env.post("/v1/slow", "key1", "k", `{"x":1}`) }()
	select {
	case r := <-other:
		idemWantStatus(t, r, http.StatusConflict)
	case <-env.entered:
		t.Fatal("a different request took the abandoned key over and ran")
	}
	go func() { done <- env.post("/v1/slow", "key1", "k", `{}`) }()
	<-env.entered // the retry runs although the first still holds its reservation
	// Release both; either may finish first. The first run's reservation is
	// gone, so its late result must not replace the successor's.
	env.release <- struct{}{}
	a := <-done
	env.release <- struct{}{}
	b := <-done
	for _, r := range []*httptest.ResponseRecorder{a, b} {
		idemWantStatus(t, r, http.StatusCreated)
	}
	if a.Body.String() == b.Body.String() {
		t.Fatal("both runs answered the same")
	}
	replayed := env.post("/v1/slow", "key1", "k", `{}`)
	successor := a
	if strings.Contains(b.Body.String(), `"call":2`) {
		successor = b
	}
	if !strings.Contains(successor.Body.String(), `"call":2`) {
		t.Fatalf("no successor run: %s / %s", a.Body, b.Body)
	}
	idemWantReplayOf(t, replayed, successor)
}

// The abandoned run finishing after its successor, with a success or with a
// server error, changes nothing of the successor's reservation: its response is
// not stored over the successor's, and its release does not delete it.
func TestIdempotencyAbandonedRunFinishingLastChangesNothing(t *testing.T) {
	for _, late := range []int{http.StatusCreated, http.StatusServiceUnavailable} {
		t.Run(strconv.Itoa(late), func(t *testing.T) {
			env := newIdemEnv(t)
			first := make(chan *httptest.ResponseRecorder, 1)
			go func() { first <- env.post("/v1/gated", "key1", "g", `{}`) }()
			<-env.entered
			env.advance(idempotencyAbandonAfter + time.Second)
			second := make(chan *httptest.ResponseRecorder, 1)
			go func() { second <- env.post("/v1/gated", "key1", "g", `{}`) }()
			<-env.entered
			env.gate(2) <- http.StatusCreated // the successor finishes first
			successor := <-second
			idemWantStatus(t, successor, http.StatusCreated)
			env.gate(1) <- late // then the abandoned run
			idemWantStatus(t, <-first, late)
			env.gate(3) <- http.StatusCreated // a wrong third run fails below, not hangs
			replayed := env.post("/v1/gated", "key1", "g", `{}`)
			idemWantReplayOf(t, replayed, successor)
			if n := env.calls.Load(); n != 2 {
				t.Fatalf("handler ran %d times, want 2", n)
			}
		})
	}
}

func TestIdempotencyScopedToAPIKey(t *testing.T) {
	env := newIdemEnv(t)
	a := env.post("/v1/things", "key1", "same", `{"amount":5000}`)
	b := env.post("/v1/things", "key2", "same", `{"amount":7000}`)
	idemWantStatus(t, a, http.StatusCreated)
	idemWantStatus(t, b, http.StatusCreated)
	if b.Header().Get(headerIdempotencyReplayed) != "" || env.calls.Load() != 2 {
		t.Fatal("a key of another API key was replayed")
	}
	idemWantReplayOf(t, env.post("/v1/things", "key2", "same", `{"amount":7000}`), b)
}

func TestIdempotencyServerErrorsAreNotStored(t *testing.T) {
	env := newIdemEnv(t)
	env.fails.Store(1)
	idemWantStatus(t, env.post("/v1/flaky", "key1", "f", `{}`), http.StatusServiceUnavailable)
	ok := env.post("/v1/flaky", "key1", "f", `{}`)
	idemWantStatus(t, ok, http.StatusCreated)
	if ok.Header().Get(headerIdempotencyReplayed) != "" {
		t.Fatal("retry after a 5xx was a replay")
	}
	idemWantReplayOf(t, env.post("/v1/flaky", "key1", "f", `{}`), ok)

	env.calls.Store(0)
	idemWantStatus(t, env.post("/v1/broken", "key1", "b", `{}`), http.StatusInternalServerError)
	idemWantStatus(t, env.post("/v1/broken", "key1", "b", `{}`), http.StatusCreated)
	if n := env.calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
}

func TestIdempotencyPanicReleasesKey(t *testing.T) {
	env := newIdemEnv(t)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		env.do(http.MethodDelete, "/v1/panic", "key1", "p", "", "")
	}()
	var n int
	if err := env.pool.QueryRow(context.Background(), `SELECT count(*) FROM http_idempotency_keys`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("a panicked request kept its reservation")
	}
}

func TestIdempotencyClientErrorsAreStored(t *testing.T) {
	env := newIdemEnv(t)
	first := env.post("/v1/invalid", "key1", "i", `{"amount":5}`)
	idemWantStatus(t, first, http.StatusBadRequest)
	idemWantReplayOf(t, env.post("/v1/invalid", "key1", "i", `{"amount":5}`), first)

	// A non-HTTP error the app's error handler renders as 4xx is stored too.
	dom := env.post("/v1/domain", "key1", "d", `{}`)
	idemWantStatus(t, dom, http.StatusUnprocessableEntity)
	idemWantReplayOf(t, env.post("/v1/domain", "key1", "d", `{}`), dom)
	if n := env.calls.Load(); n != 2 {
		t.Fatalf("handlers ran %d times, want 2", n)
	}
}

func TestIdempotencyKeysExpire(t *testing.T) {
	env := newIdemEnv(t)
	idemWantStatus(t, env.post("/v1/things", "key1", "old", `{"amount":5000}`), http.StatusCreated)
	idemWantStatus(t, env.post("/v1/things", "key1", "gone", `{"amount":5000}`), http.StatusCreated)
	env.advance(idempotencyTTL - time.Second)
	idemWantStatus(t, env.post("/v1/things", "key1", "old", `{"amount":6000}`), http.StatusConflict)

	env.advance(2 * idempotencySweepEvery) // past the TTL and the next sweep
	// Expired: the key is free for any request (and no replay).
	rec := env.post("/v1/things", "key1", "old", `{"amount":6000}`)
	idemWantStatus(t, rec, http.StatusCreated)
	if rec.Header().Get(headerIdempotencyReplayed) != "" {
		t.Fatal("expired key replayed")
	}
	// ...and expired rows are swept.
	var n int
	if err := env.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM http_idempotency_keys WHERE idempotency_key = 'gone'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("expired key not swept")
	}
}

func TestIdempotencyPassThrough(t *testing.T) {
	env := newIdemEnv(t)
	// GET with a key, POST without a key, POST without a principal: the
	// handler runs every time and nothing is stored.
	for range 2 {
		rec := env.do(http.MethodGet, "/v1/things", "key1", "g", "", "")
		idemWantStatus(t, rec, http.StatusOK)
		if rec.Header().Get(headerIdempotencyReplayed) != "" {
			t.Fatal("GET replayed")
		}
		idemWantStatus(t, env.post("/v1/things", "key1", "", `{}`), http.StatusCreated)
		idemWantStatus(t, env.post("/v1/things", "", "anon", `{}`), http.StatusCreated)
	}
	if n := env.calls.Load(); n != 6 {
		t.Fatalf("handlers ran %d times, want 6", n)
	}
	var n int
	if err := env.pool.QueryRow(context.Background(), `SELECT count(*) FROM http_idempotency_keys`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d keys stored", n)
	}
}

func TestIdempotencyKeyLength(t *testing.T) {
	env := newIdemEnv(t)
	idemWantStatus(t, env.post("/v1/things", "key1", strings.Repeat("k", 255), `{}`), http.StatusCreated)
	rec := env.post("/v1/things", "key1", strings.Repeat("k", 256), `{}`)
	idemWantStatus(t, rec, http.StatusBadRequest)
	want := `{"status":400,"message":"Idempotency-Key must be at most 255 characters","data":{}}`
	if got := strings.TrimSpace(rec.Body.String()); got != want {
		t.Fatalf("body %s, want %s", got, want)
	}
	if n := env.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
}

func TestIdempotencyBodyOverLimit(t *testing.T) {
	env := newIdemEnv(t)
	idemWantStatus(t, env.post("/v1/things", "key1", "big", `"`+strings.Repeat("x", 2<<10)+`"`), http.StatusRequestEntityTooLarge)
	if n := env.calls.Load(); n != 0 {
		t.Fatalf("handler ran %d times", n)
	}
}

func TestIdempotencyMultipartIgnoresBoundary(t *testing.T) {
	env := newIdemEnv(t)
	form := func(boundary, name string) (string, string) {
		var buf bytes.Buffer
		w := multipart.NewWriter(&buf)
		if err := w.SetBoundary(boundary); err != nil {
			t.Fatal(err)
		}
		_ = w.WriteField("name", name)
		fw, _ := w.CreateFormFile("file", "a.png")
		_, _ = fw.Write([]byte("\x89PNG\r\n\x1a\nimage bytes"))
		_ = w.Close()
		return w.FormDataContentType(), buf.String()
	}
	ct, body := form("boundary-one-1111", "shoes")
	first := env.do(http.MethodPut, "/v1/form", "key1", "m", ct, body)
	idemWantStatus(t, first, http.StatusOK)
	if !strings.Contains(first.Body.String(), `"name":"shoes"`) {
		t.Fatalf("handler did not parse the form: %s", first.Body)
	}
	ct, body = form("boundary-two-2222", "shoes")
	idemWantReplayOf(t, env.do(http.MethodPut, "/v1/form", "key1", "m", ct, body), first)
	ct, body = form("boundary-three-33", "boots")
	idemWantStatus(t, env.do(http.MethodPut, "/v1/form", "key1", "m", ct, body), http.StatusConflict)
}

// A request that wrote and then died before its response was stored (here:
// it never finishes) must not run again when a retry takes its abandoned
// reservation over: the retry learns that the write happened and answers so.
func TestIdempotencyWriteWithoutStoredResponseIsNotRunAgain(t *testing.T) {
	env := newIdemEnv(t)
	hang := make(chan struct{})
	defer close(hang)
	env.write = idemWrite{after: func(c echo.Context) error {
		if env.calls.Load() > 1 { // a second run: the failure under test
			return c.JSON(http.StatusCreated, map[string]any{})
		}
		env.entered <- struct{}{}
		<-hang
		return nil
	}}
	go env.post("/v1/write", "key1", "w", `a`)
	<-env.entered // the append has committed; no response is stored

	env.wantLostOnceAbandoned(t)
}

// An append whose commit succeeded but whose answer was lost fails the
// request with a 500, yet the key must not be released for a retry that
// would run the request again: it stays in flight until a takeover, whose
// fence finds that the request wrote.
func TestIdempotencyUnknownOutcomeIsNotRunAgain(t *testing.T) {
	env := newIdemEnv(t)
	env.loseAnswer.Store(true)
	idemWantStatus(t, env.post("/v1/write", "key1", "w", `a`), http.StatusInternalServerError)
	if n := env.things("a"); n != 1 {
		t.Fatalf("the lost append committed %d events", n)
	}
	env.wantLostOnceAbandoned(t)
}

// A request that wrote and was only slow, not dead, may still store its
// response while a retry takes its reservation over: the retry, having learnt
// that it wrote, must not then overwrite that response with "lost", but
// answer it.
func TestIdempotencySlowRequestStoringDuringTakeoverIsReplayed(t *testing.T) {
	env := newIdemEnv(t)
	finish := make(chan struct{})
	env.write = idemWrite{after: func(c echo.Context) error {
		env.entered <- struct{}{}
		<-finish
		return c.JSON(http.StatusCreated, map[string]any{"slow": true})
	}}
	first := make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- env.post("/v1/write", "key1", "w", `a`) }()
	<-env.entered // the append has committed; no response is stored yet

	env.advance(idempotencyAbandonAfter + time.Second)
	var stored *httptest.ResponseRecorder
	env.afterFence = func() { // the slow request finishes between fence and store
		if stored == nil {
			close(finish)
			stored = <-first
		}
	}
	retry := env.post("/v1/write", "key1", "w", `a`)
	if stored == nil {
		t.Fatal("the retry never fenced the reservation")
	}
	idemWantStatus(t, stored, http.StatusCreated)
	idemWantReplayOf(t, retry, stored)
	if strings.Contains(retry.Body.String(), msgIdempotencyOutcomeLost) {
		t.Fatalf("retry answered a lost outcome: %s", retry.Body)
	}
	idemWantReplayOf(t, env.post("/v1/write", "key1", "w", `a`), stored)
	if n, w := env.calls.Load(), env.things("a"); n != 1 || w != 1 {
		t.Fatalf("handler ran %d times and wrote %d events, want 1 and 1", n, w)
	}
}

// A slow request that wrote nothing may likewise store its answer after a
// retry has fenced its reservation and found no write: the takeover is a
// compare-and-set on the row still being in flight, so the retry then
// replays that answer instead of running the request a second time (which
// could now move money where the first answer said it did not).
func TestIdempotencyTakeoverAfterTheAnswerIsStoredReplaysIt(t *testing.T) {
	env := newIdemEnv(t)
	first := make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- env.post("/v1/slow", "key1", "k", `{}`) }()
	<-env.entered // running, nothing written, nothing stored

	env.advance(idempotencyAbandonAfter + time.Second)
	var stored *httptest.ResponseRecorder
	env.afterFence = func() { // the slow request finishes between fence and takeover
		if stored == nil {
			close(env.release)
			stored = <-first
		}
	}
	retry := env.post("/v1/slow", "key1", "k", `{}`)
	if stored == nil {
		t.Fatal("the retry never fenced the reservation")
	}
	idemWantStatus(t, stored, http.StatusCreated)
	idemWantReplayOf(t, retry, stored)
	if n := env.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want once", n)
	}
}

// A reservation whose request wrote but never stored its response is answered
// as a lost outcome only while the key lives: once it has expired (24 h)
// the key is free like any expired key, and a new request under it runs.
func TestIdempotencyExpiredReservationThatWroteFreesTheKey(t *testing.T) {
	env := newIdemEnv(t)
	hang := make(chan struct{})
	defer close(hang)
	env.write = idemWrite{after: func(c echo.Context) error {
		if env.calls.Load() > 1 {
			return c.JSON(http.StatusCreated, map[string]any{"second": true})
		}
		env.entered <- struct{}{}
		<-hang
		return nil
	}}
	go env.post("/v1/write", "key1", "w", `a`)
	<-env.entered // the append has committed; no response is stored

	// A sweep just before the key expires, so that the retry finds the
	// expired row rather than an empty slot (sweeps run once a minute).
	env.advance(idempotencyTTL - idempotencySweepEvery/2)
	idemWantStatus(t, env.post("/v1/things", "key1", "other", `{"amount":5000}`), http.StatusCreated)
	env.advance(idempotencySweepEvery/2 + time.Second)
	var rows int
	if err := env.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM http_idempotency_keys WHERE idempotency_key = 'w'`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("the expired reservation's row: %d (%v), want it still there", rows, err)
	}
	rec := env.post("/v1/write", "key1", "w", `b`)
	idemWantStatus(t, rec, http.StatusCreated)
	if strings.Contains(rec.Body.String(), msgIdempotencyOutcomeLost) || rec.Header().Get(headerIdempotencyReplayed) != "" {
		t.Fatalf("new request under an expired key: %v %s", rec.Header(), rec.Body)
	}
	if n, a, b := env.calls.Load(), env.things("a"), env.things("b"); n != 3 || a != 1 || b != 1 {
		t.Fatalf("handlers ran %d times, wrote %d events for a and %d for b; want 3 (with /v1/things), 1, 1", n, a, b)
	}
	idemWantReplayOf(t, env.post("/v1/write", "key1", "w", `b`), rec)
}

// A retry that takes over a reservation whose request has not written yet runs
// the request; the abandoned request, waking up, can no longer write.
func TestIdempotencyTakeoverFencesTheAbandonedRequest(t *testing.T) {
	env := newIdemEnv(t)
	proceed := map[int64]chan struct{}{1: make(chan struct{}), 2: make(chan struct{})}
	results := make(chan error, 2)
	env.write = idemWrite{before: func(n int64) { env.entered <- struct{}{}; <-proceed[n] }, result: results}
	first := make(chan *httptest.ResponseRecorder)
	go func() { first <- env.post("/v1/write", "key1", "w", `a`) }()
	<-env.entered // reserved, not written

	env.advance(idempotencyAbandonAfter + time.Second)
	retry := make(chan *httptest.ResponseRecorder)
	go func() { retry <- env.post("/v1/write", "key1", "w", `a`) }()
	<-env.entered
	close(proceed[2]) // the retry writes
	if err := <-results; err != nil {
		t.Fatalf("the retry's append: %v", err)
	}
	won := <-retry
	idemWantStatus(t, won, http.StatusCreated)

	close(proceed[1]) // the abandoned request wakes up
	if err := <-results; !errors.Is(err, app.ErrReservationLost) {
		t.Fatalf("the abandoned request's append: %v, want ErrReservationLost", err)
	}
	idemWantStatus(t, <-first, http.StatusConflict)
	if w := env.things("a"); w != 1 {
		t.Fatalf("%d events written, want 1", w)
	}
	idemWantReplayOf(t, env.post("/v1/write", "key1", "w", `a`), won)
}

// A server error after a write (the read models lagging behind a saved
// change) is the request's outcome: a retry replays it and writes nothing.
func TestIdempotencyServerErrorAfterWriteIsStored(t *testing.T) {
	env := newIdemEnv(t)
	env.write = idemWrite{after: func(c echo.Context) error {
		return c.JSON(http.StatusServiceUnavailable, map[string]any{"status": 503, "message": "saved, read later"})
	}}
	first := env.post("/v1/write", "key1", "w", `a`)
	idemWantStatus(t, first, http.StatusServiceUnavailable)
	idemWantReplayOf(t, env.post("/v1/write", "key1", "w", `a`), first)
	if n, w := env.calls.Load(), env.things("a"); n != 1 || w != 1 {
		t.Fatalf("handler ran %d times and wrote %d events, want 1 and 1", n, w)
	}
}

// A panic after a write keeps the reservation: the key stays in flight and, once
// abandoned, answers that the outcome was lost; it never runs again.
func TestIdempotencyPanicAfterWriteKeepsKey(t *testing.T) {
	env := newIdemEnv(t)
	env.write = idemWrite{after: func(echo.Context) error { panic("after the write") }}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		env.post("/v1/write", "key1", "w", `a`)
	}()
	env.wantLostOnceAbandoned(t)
}

// wantLostOnceAbandoned: the reservation of a /v1/write of "a" under key "w"
// that wrote and never stored its response answers in progress; once
// abandoned, a retry is answered (as a replay, and replayed again) that
// the outcome was lost, and the handler never runs again.
func (env *idemEnv) wantLostOnceAbandoned(t *testing.T) {
	t.Helper()
	idemWantStatus(t, env.post("/v1/write", "key1", "w", `a`), http.StatusConflict) // in flight
	env.advance(idempotencyAbandonAfter + time.Second)
	lost := env.post("/v1/write", "key1", "w", `a`)
	idemWantStatus(t, lost, http.StatusConflict)
	if !strings.Contains(lost.Body.String(), msgIdempotencyOutcomeLost) {
		t.Fatalf("retry of a request that wrote: %d %s", lost.Code, lost.Body)
	}
	if lost.Header().Get(headerIdempotencyReplayed) != "true" {
		t.Fatalf("lost outcome without %s: %v", headerIdempotencyReplayed, lost.Header())
	}
	idemWantReplayOf(t, env.post("/v1/write", "key1", "w", `a`), lost)
	if n, w := env.calls.Load(), env.things("a"); n != 1 || w != 1 {
		t.Fatalf("handler ran %d times and wrote %d events, want 1 and 1", n, w)
	}
}

// Retries racing to take one abandoned reservation over: exactly one runs.
func TestIdempotencyRacingTakeoversRunOnce(t *testing.T) {
	env := newIdemEnv(t)
	proceed := make(chan struct{})
	env.write = idemWrite{before: func(int64) { env.entered <- struct{}{}; <-proceed }}
	first := make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- env.post("/v1/write", "key1", "w", `a`) }()
	<-env.entered
	env.advance(idempotencyAbandonAfter + time.Second)

	const retries = 8
	answers := make(chan *httptest.ResponseRecorder, retries)
	for range retries {
		go func() { answers <- env.post("/v1/write", "key1", "w", `a`) }()
	}
	<-env.entered // one retry took over; the others must answer without running
	codes := map[int]int{}
	for range retries - 1 {
		codes[(<-answers).Code]++
	}
	close(proceed) // let the winner and the abandoned request go on
	codes[(<-answers).Code]++
	codes[(<-first).Code]++
	if codes[http.StatusCreated] != 1 || codes[http.StatusConflict] != retries {
		t.Fatalf("answers by status: %v, want one 201 and %d 409", codes, retries)
	}
	if n, w := env.calls.Load(), env.things("a"); n != 2 || w != 1 {
		t.Fatalf("handler ran %d times and wrote %d events, want 2 and 1", n, w)
	}
}

// The multipart fingerprint (boundary blanked while hashing) equals the
// hash of the body with the boundary replaced, for bodies with any number
// of boundaries.
func TestMultipartFingerprintIgnoresOnlyTheBoundary(t *testing.T) {
	fp := func(ct, body string) []byte {
		req := httptest.NewRequest(http.MethodPost, "/v1/x?a=1", nil)
		req.Header.Set(echo.HeaderContentType, ct)
		return requestFingerprint(req, []byte(body))
	}
	for _, body := range []string{"", "no boundary at all", "--B\r\nx\r\n--B--", "--B--B--B", "a--Bb--B"} {
		a := fp("multipart/form-data; boundary=B", body)
		b := fp("multipart/form-data; boundary=QQ", strings.ReplaceAll(body, "--B", "--QQ"))
		if !bytes.Equal(a, b) {
			t.Errorf("%q: fingerprints differ across boundaries", body)
		}
		if c := fp("multipart/form-data; boundary=B", body+"x"); bytes.Equal(a, c) {
			t.Errorf("%q: a changed body has the same fingerprint", body)
		}
	}
	if bytes.Equal(fp("multipart/form-data; boundary=B", "--Bx"), fp("multipart/form-data; boundary=B", "--By")) {
		t.Error("content after a boundary is ignored")
	}
}

// TestIdempotencyRefusalsExpireSooner: a 4xx answer of a request that
// wrote nothing is replayed for idempotencyRefusalTTL, then forgotten (and
// swept), so refusals cannot pile up for a day; a 4xx of a request that
// wrote keeps the full idempotencyTTL, since running it again could write
// twice.
func TestIdempotencyRefusalsExpireSooner(t *testing.T) {
	env := newIdemEnv(t)
	env.write = idemWrite{after: func(c echo.Context) error {
		return c.JSON(http.StatusBadRequest, map[string]any{"status": 400, "message": "wrote, then refused"})
	}}
	refused := env.post("/v1/invalid", "key1", "i", `{"amount":5}`)
	idemWantStatus(t, refused, http.StatusBadRequest)
	wrote := env.post("/v1/write", "key1", "w", `a`)
	idemWantStatus(t, wrote, http.StatusBadRequest)

	env.advance(idempotencyRefusalTTL - time.Second)
	idemWantReplayOf(t, env.post("/v1/invalid", "key1", "i", `{"amount":5}`), refused)
	env.advance(time.Second + idempotencySweepEvery)
	// The sweep this request ran removed the refusal before it reserved.
	again := env.post("/v1/invalid", "key1", "i", `{"amount":5}`)
	idemWantStatus(t, again, http.StatusBadRequest)
	if again.Header().Get(headerIdempotencyReplayed) != "" {
		t.Fatal("a refusal was replayed past idempotencyRefusalTTL")
	}
	if n := env.calls.Load(); n != 3 {
		t.Fatalf("handlers ran %d times, want 3 (the refused request twice)", n)
	}
	idemWantReplayOf(t, env.post("/v1/write", "key1", "w", `a`), wrote)
	env.advance(idempotencyTTL - idempotencyRefusalTTL - idempotencySweepEvery - time.Minute)
	idemWantReplayOf(t, env.post("/v1/write", "key1", "w", `a`), wrote)
	if n := env.things("a"); n != 1 {
		t.Fatalf("%d events written, want 1", n)
	}
}

// TestIdempotencySweepKeepsUp: a backlog of expired keys larger than one
// sweep is removed by the requests that follow, not at one sweep's worth a
// minute, which any stream of keyed refusals outran.
func TestIdempotencySweepKeepsUp(t *testing.T) {
	env := newIdemEnv(t)
	now := time.Unix(0, env.now.Load()).UTC()
	const expired = 3*idempotencySweepRounds*idempotencySweepBatch + 17
	if _, err := env.pool.Exec(context.Background(), `
INSERT INTO http_idempotency_keys (key_id, idempotency_key, fingerprint, owner, created_at, completed_at, status, expires_at)
SELECT 'old', 'k' || i, '\x00', '\x00', $1, $1, 400, $2 FROM generate_series(1, $3) AS i`,
		now.Add(-2*time.Hour), now.Add(-time.Hour), expired); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		idemWantStatus(t, env.post("/v1/things", "key1", "k"+strconv.Itoa(i), `{}`), http.StatusCreated)
	}
	var left, kept int
	if err := env.pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE key_id = 'old'),
		count(*) FILTER (WHERE key_id <> 'old') FROM http_idempotency_keys`).Scan(&left, &kept); err != nil {
		t.Fatal(err)
	}
	if left != 0 || kept != 5 {
		t.Fatalf("%d expired keys left, %d live ones kept; want 0 and 5", left, kept)
	}
}
