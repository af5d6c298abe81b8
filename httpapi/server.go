// Package httpapi is the HTTP JSON API: routing, the envelope, auth, rate
// limiting, idempotency keys, request decoding and the one error-to-status
// mapping. Handlers stay thin: decode, call the application, wait for the
// read models to include the write, respond.
package httpapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/dashauth"
	"github.com/escrowd/escrowd/internal/files"
	"github.com/escrowd/escrowd/internal/inbox"
	"github.com/escrowd/escrowd/projections"
	"github.com/escrowd/escrowd/webhooks"
)

// Config is the HTTP layer's configuration.
type Config struct {
	Hosts              map[string]domain.Environment
	DefaultEnvironment domain.Environment
	RateLimitPerMinute int
	TrustedProxies     []*net.IPNet
	// JSONBodyLimit caps every request body that is not multipart (bytes),
	// on every route; a multipart body on a route that takes files has its
	// own, larger cap.
	JSONBodyLimit      int64
	MultipartBodyLimit int64
	// MaxReadyLag is the projection lag (events) above which /readyz fails.
	MaxReadyLag int64
	// MaxReadyWebhookLag is the webhook subscriber's lag (events) above
	// which /readyz fails, with ReadyWebhooks (default 100,000). It is
	// separate and higher because a slow subscriber delays notifications but
	// not a single API answer: taking the instance out of a load balancer
	// for it would turn late webhooks into a down API. The limit catches a
	// subscriber that is stuck, not one that is busy.
	MaxReadyWebhookLag int64
	// MaxReadyHorizon is how long committed events may wait behind an open
	// transaction (eventstore.Horizon) before /readyz fails (default 2 s).
	// Such a transaction holds every read model and the webhook subscriber
	// back together, so their lags read zero while reads wait for them;
	// the answer names the transaction.
	MaxReadyHorizon time.Duration
	// ReadyWebhooks is set when the process runs the webhooks role: /readyz
	// then also reports and checks the webhook subscriber's lag
	// (webhookLag), read with the projection lag when the waiter can
	// (projections.Runner.Lags).
	ReadyWebhooks bool
	// BSCMasterAddress is the platform's BSC deposit address per
	// environment; an environment without one has crypto disabled.
	BSCMasterAddress map[domain.Environment]string
	// PublicURL is the base of uploaded files' URLs (default
	// http://localhost:8080).
	PublicURL string
	// Files is where uploaded files are kept, shared by every instance
	// (files.Postgres, files.S3); required.
	Files files.Backend
	// FilesFolder, when set, is the folder an older server kept files in
	// on this machine: its files are served (and removed with their
	// escrows) until they are moved into Files (files.Store.ServeFolder).
	FilesFolder string
	// FilesQuota bounds each merchant environment's stored files in bytes
	// (default 1,024 MB); an upload past it is 413.
	FilesQuota int64
	// Dashboard keeps the dashboard's users and sessions, sealing their
	// TOTP secrets with the master key's data keys; nil (no master key)
	// serves no dashboard pages but the login page's refusal.
	Dashboard *dashauth.Store
	// WebhookAllowPrivate lets callback URLs of either environment resolve
	// to private or loopback addresses (ESCROW_WEBHOOK_ALLOW_PRIVATE).
	WebhookAllowPrivate bool
}

// Waiter lets a request wait until the named read models (every one when
// none is named) include a position.
type Waiter interface {
	WaitFor(ctx context.Context, pos eventstore.Position, names ...string) error
	Lag(ctx context.Context) (int64, error)
}

// parkedReporter is a Waiter that knows which projectors parked an event.
type parkedReporter interface {
	Parked(ctx context.Context) (map[string]*projections.Parked, error)
}

// checkpointLagger is a Waiter that also measures other stored checkpoints
// against the same head (projections.Runner).
type checkpointLagger interface {
	Lags(ctx context.Context, limit, othersLimit int64, others ...string) (int64, map[string]int64, error)
}

// horizonReporter is a Waiter that reports the store's visibility horizon
// (projections.Runner).
type horizonReporter interface {
	Horizon(ctx context.Context, limit int64, explainAfter time.Duration) (eventstore.Horizon, bool, error)
}

// Server is the API.
type Server struct {
	cfg Config
	e   *echo.Echo
	log *zap.Logger
	dir Directory
	app *app.Service
	// queries are the read models; read them through readModels.
	queries *projections.Queries
	last    func(context.Context) (eventstore.Position, error)
	// eventLog is the event store, read by the audit trail (GET /v1/events).
	eventLog eventstore.Store
	waiter   Waiter
	limiter  RateLimiter
	idem     *IdempotencyStore
	keyUses  *KeyUses
	metrics  *Metrics
	ping     func(context.Context) error
	files    *files.Store
	hooks    *webhooks.Outbox
	inbox    *inbox.Worker
	users    *dashauth.Store
	// masterQR holds the master wallet addresses' QR codes.
	masterQR qrCache
	closers  []func()
}

// Deps are the server's collaborators.
type Deps struct {
	Log     *zap.Logger
	App     *app.Service
	Queries *projections.Queries
	// Last is the event store's Last: the position a read waits for, so
	// that it sees every write acknowledged before it (readModels). Nil
	// with a nil Waiter: reads do not wait.
	Last func(context.Context) (eventstore.Position, error)
	// EventLog is the event store the audit trail reads.
	EventLog eventstore.Store
	Waiter   Waiter
	Limiter  RateLimiter
	Idem     *IdempotencyStore
	// KeyUses records when each key was last used (nil: not recorded).
	KeyUses   *KeyUses
	Registry  *prometheus.Registry
	Ping      func(context.Context) error
	Directory Directory
	Webhooks  *webhooks.Outbox
	// Inbox keeps providers' inbound events and processes them (its
	// worker runs where the process runs it); nil refuses them.
	Inbox *inbox.Worker
	// Dashboard keeps the dashboard's users and sessions; nil serves no
	// dashboard pages but the login page's refusal.
	Dashboard *dashauth.Store
	// Closers stop background work of the dependencies (the auth cache's
	// log tail) when the server is closed.
	Closers []func()
}

// Files is the store of uploaded files the API keeps them in.
func (s *Server) Files() *files.Store { return s.files }

// New builds the API.
func New(cfg Config, d Deps) *Server {
	if cfg.DefaultEnvironment == "" {
		cfg.DefaultEnvironment = domain.Test
	}
	if cfg.JSONBodyLimit == 0 {
		cfg.JSONBodyLimit = 1 << 20
	}
	if cfg.FilesQuota == 0 {
		cfg.FilesQuota = 1024 << 20
	}
	if cfg.MultipartBodyLimit == 0 {
		cfg.MultipartBodyLimit = 32 << 20
	}
	if cfg.MaxReadyHorizon <= 0 {
		cfg.MaxReadyHorizon = 2 * time.Second
	}
	if cfg.MaxReadyLag == 0 {
		cfg.MaxReadyLag = 10000
	}
	if cfg.MaxReadyWebhookLag == 0 {
		cfg.MaxReadyWebhookLag = 100_000
	}
	if cfg.PublicURL == "" {
		cfg.PublicURL = "http://localhost:8080"
	}
	s := &Server{cfg: cfg, log: d.Log, dir: d.Directory, app: d.App, queries: d.Queries, last: d.Last, eventLog: d.EventLog, waiter: d.Waiter,
		limiter: d.Limiter, idem: d.Idem, keyUses: d.KeyUses, ping: d.Ping, hooks: d.Webhooks, inbox: d.Inbox, users: d.Dashboard, closers: d.Closers}
	s.files = files.New(cfg.Files, cfg.PublicURL, cfg.FilesQuota)
	if cfg.FilesFolder != "" {
		s.files.ServeFolder(cfg.FilesFolder)
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.errorHandler
	e.IPExtractor = ipExtractor(cfg.TrustedProxies)
	reg := d.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	s.metrics = NewMetrics(reg)
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisableStackAll: true}))
	e.Use(s.requestLog)
	e.Use(s.metrics.Middleware())
	e.Use(textGuard)
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	s.e = e
	s.routes()
	return s
}

// Close stops the server's background work (the auth cache's log tail). It
// does not close the store or the pool, which the caller owns.
func (s *Server) Close() {
	for _, c := range s.closers {
		c()
	}
}

// App returns the application the server drives (tests issue commands
// through it directly).
func (s *Server) App() *app.Service { return s.app }

// now is the application's clock, which key expiry is judged by.
func (s *Server) now() time.Time {
	if s.app != nil {
		return s.app.Now()
	}
	return time.Now()
}

func orNop(l *zap.Logger) *zap.Logger {
	if l == nil {
		return zap.NewNop()
	}
	return l
}

// Handler is the http.Handler of the API.
func (s *Server) Handler() http.Handler { return s.e }

// Echo exposes the router (tests, extra routes).
func (s *Server) Echo() *echo.Echo { return s.e }

func ipExtractor(trusted []*net.IPNet) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, n := range trusted {
		opts = append(opts, echo.TrustIPRange(n))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// handle registers a route with its access policy. Writes get body limits
// and idempotency keys.
func (s *Server) handle(method, path string, pol Policy, h echo.HandlerFunc, multipart ...bool) {
	limit := bodyLimit(s.cfg.JSONBodyLimit)
	if len(multipart) > 0 && multipart[0] {
		limit = uploadBodyLimit(s.cfg.JSONBodyLimit, s.cfg.MultipartBodyLimit)
	}
	mws := []echo.MiddlewareFunc{limit, s.authenticate(pol)}
	if method != http.MethodGet && s.idem != nil {
		mws = append(mws, s.idem.Middleware())
	}
	s.e.Add(method, path, h, mws...)
}

// bodyLimit refuses bodies over n bytes with 413: at once when the
// declared length is over, otherwise while the body is read, so no more
// than n bytes of it are ever read.
func bodyLimit(n int64) echo.MiddlewareFunc {
	return bodyLimitBy(func(*http.Request) int64 { return n })
}

// uploadBodyLimit is the limit of a route that takes files: a multipart
// body may reach multipart bytes (its files spill to disk as they are
// parsed), any other body (JSON, read into memory) only jsonLimit.
func uploadBodyLimit(jsonLimit, multipart int64) echo.MiddlewareFunc {
	return bodyLimitBy(func(r *http.Request) int64 {
		if isMultipart(r) {
			return multipart
		}
		return jsonLimit
	})
}

func bodyLimitBy(limitOf func(*http.Request) int64) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			n := limitOf(r)
			if r.ContentLength > n {
				return &domain.Error{Code: domain.TooLarge, Message: "Request body too large"}
			}
			r.Body = http.MaxBytesReader(c.Response(), r.Body, n)
			return next(c)
		}
	}
}

// awaitWrite waits until the named read models (those the answer is read
// from) include a write, for a write that answers with what they hold; a
// lagging projector gives 503, never stale data. Writes that answer from
// their own events do not call it: reads wait instead (readModels).
func (s *Server) awaitWrite(c echo.Context, pos eventstore.Position, names ...string) error {
	if pos == (eventstore.Position{}) || s.waiter == nil {
		return nil
	}
	return s.waitFor(c.Request().Context(), pos, "The service is busy; the change was saved, retry reading shortly", "the change was saved, but ", names...)
}

// waitFor waits until the named read models (all when none is named)
// include pos; a projector that does not catch up in time is 503 with busy,
// the message saying what the client may assume, and one that parked an
// event it cannot apply is 503 naming it, after saved (what the client may
// assume then).
func (s *Server) waitFor(ctx context.Context, pos eventstore.Position, busy, saved string, names ...string) error {
	err := s.waiter.WaitFor(ctx, pos, names...)
	var parked *projections.ParkedError
	switch {
	case errors.As(err, &parked):
		msg := saved + "the " + parked.Projector + " read model is stopped at an event it cannot apply; retry once an operator has resolved it"
		return &domain.Error{Code: domain.Unavailable, Message: strings.ToUpper(msg[:1]) + msg[1:]}
	case errors.Is(err, projections.ErrLagging):
		return &domain.Error{Code: domain.Unavailable, Message: busy}
	}
	return err
}

// ctxFence holds the position a request's reads of the read models wait
// for: the log's newest event when it first read one.
const ctxFence = "escrowd.readFence"

// readModels returns the read models named (the projectors of the tables
// the caller queries) once they include every write acknowledged before
// this request's first read of the read models: it waits for the store's
// newest committed event (eventstore.Store.Last), read once per request.
// Other read models are not waited for, so one projector stuck behind
// holds back only the reads of its own tables.
//
// Writes answer from the events they append and return as soon as those
// are committed, without waiting for the projectors; the wait is paid by
// reads instead, so a read still sees every earlier write, made through
// this server or any other sharing the database. A write that answers
// with what the read models hold calls awaitWrite for its own events, since a
// fence taken before its append does not include them. awaitWrite does not
// count as the fence: it waits for the position the command returned,
// which need not be past every write acknowledged before the request (a
// command that finds nothing to do may return none, or an earlier one). A
// lagging projector gives 503, never stale data.
func (s *Server) readModels(c echo.Context, names ...string) (*projections.Queries, error) {
	if s.waiter == nil || s.last == nil {
		return s.queries, nil
	}
	ctx := c.Request().Context()
	pos, fenced := c.Get(ctxFence).(eventstore.Position)
	if !fenced {
		var err error
		if pos, err = s.last(ctx); err != nil {
			return nil, err
		}
		c.Set(ctxFence, pos)
	}
	if err := s.waitFor(ctx, pos, "The service is busy; retry shortly", "", names...); err != nil {
		return nil, err
	}
	return s.queries, nil
}

func (s *Server) healthz(c echo.Context) error {
	return respond(c, http.StatusOK, "OK", map[string]string{"status": "ok"})
}

func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	out := map[string]any{}
	ok := true
	if s.ping != nil {
		if err := s.ping(ctx); err != nil {
			out["database"] = "unavailable"
			ok = false
		} else {
			out["database"] = "ok"
		}
	}
	if s.waiter != nil {
		var (
			lag  int64
			hook *int64
			err  error
		)
		if cl, can := s.waiter.(checkpointLagger); can {
			// Each lag is counted one past its threshold, so a count
			// capped by the runner can still fail the check.
			var others map[string]int64
			if s.cfg.ReadyWebhooks {
				lag, others, err = cl.Lags(ctx, s.cfg.MaxReadyLag+1, s.cfg.MaxReadyWebhookLag+1, webhooks.SubscriberName)
				if n, found := others[webhooks.SubscriberName]; found {
					hook = &n
				}
				// No checkpoint yet: the subscriber has not started.
				out["webhookLag"] = hook
				if hook == nil || *hook > s.cfg.MaxReadyWebhookLag {
					ok = false
				}
			} else {
				lag, _, err = cl.Lags(ctx, s.cfg.MaxReadyLag+1, 0)
			}
		} else {
			lag, err = s.waiter.Lag(ctx)
		}
		out["projectionLag"] = lag
		if err != nil || lag > s.cfg.MaxReadyLag {
			ok = false
		}
		if pr, can := s.waiter.(parkedReporter); can {
			// Reported, not failed on: the other read models serve, and
			// the parked one's reads answer 503 naming it.
			parked, err := pr.Parked(ctx)
			if err != nil {
				ok = false
			}
			names := make([]string, 0, len(parked))
			for name := range parked {
				names = append(names, name)
			}
			slices.Sort(names)
			out["parked"] = names
		}
		if hr, can := s.waiter.(horizonReporter); can {
			h, has, err := hr.Horizon(ctx, s.cfg.MaxReadyLag+1, s.cfg.MaxReadyHorizon)
			switch {
			case err != nil:
				ok = false
			case has:
				out["horizon"] = map[string]any{
					"heldEvents":   h.Held,
					"heldForMs":    h.HeldFor.Milliseconds(),
					"blockedBy":    h.Blocker,
					"maxHeldForMs": s.cfg.MaxReadyHorizon.Milliseconds(),
				}
				if h.HeldFor > s.cfg.MaxReadyHorizon {
					ok = false
				}
			}
		}
	}
	if !ok {
		return c.JSON(http.StatusServiceUnavailable, Envelope{Status: 503, Message: "Not ready", Data: out})
	}
	return respond(c, http.StatusOK, "Ready", out)
}

func (s *Server) requestLog(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		id := requestID(c)
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		res := c.Response()
		s.log.Info("request",
			zap.String("method", c.Request().Method),
			zap.String("route", c.Path()),
			zap.Int("status", res.Status),
			zap.Int64("bytes", res.Size),
			zap.Duration("duration", time.Since(start)),
			zap.String("ip", c.RealIP()),
			zap.String("path", redactKeys(c.Request().URL.Path)),
			zap.Inline(requestIDs{c}),
		)
		return nil
	}
}

const ctxRequestID = "escrowd.requestID"

// requestID is the request's id: the client's X-Request-Id when it is one
// the API accepts, otherwise a new one, set on the request too, so that
// the events the request records carry it. An unacceptable id is kept on
// the request for textGuard to refuse, and never echoed.
func requestID(c echo.Context) string {
	if id, ok := c.Get(ctxRequestID).(string); ok {
		return id
	}
	r := c.Request()
	id := r.Header.Get(echo.HeaderXRequestID)
	switch {
	case id == "":
		id = uuid.NewString()
		r.Header.Set(echo.HeaderXRequestID, id)
	case !validRequestID(id):
		id = uuid.NewString()
	}
	c.Set(ctxRequestID, id)
	return id
}

func errField(err error) zap.Field { return zap.Error(err) }

// reqField is what every log line about a request carries: its method and
// path (keys redacted), its id, and once it is authenticated the merchant,
// the key's id and the environment.
func reqField(c echo.Context) zap.Field { return zap.Inline(requestFields{c}) }

type requestFields struct{ c echo.Context }

func (f requestFields) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	r := f.c.Request()
	enc.AddString("path", r.Method+" "+redactKeys(r.URL.Path))
	return requestIDs(f).MarshalLogObject(enc)
}

// requestIDs are the request's id and, once it is authenticated, its
// merchant, key id and environment.
type requestIDs struct{ c echo.Context }

func (f requestIDs) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("request_id", requestID(f.c))
	if p, ok := PrincipalFrom(f.c); ok {
		enc.AddString("merchant_id", p.MerchantID)
		enc.AddString("key_id", p.KeyID)
		enc.AddString("environment", string(p.Environment))
	}
	return nil
}

// loggedKey is anything shaped like an API key (or its start): a client
// that puts its key in a path, by mistake or to probe, must not have it
// written to the logs.
var loggedKey = regexp.MustCompile(`sk_(test|live)_[0-9A-Za-z]*`)

// redactKeys hides API keys in text bound for the logs.
func redactKeys(s string) string {
	if !strings.Contains(s, "sk_") {
		return s
	}
	return loggedKey.ReplaceAllString(s, "sk_${1}_[redacted]")
}

// Limits bound what one connection may hold of the server: how long it may
// take to send its headers and its whole request, how long its answer and
// an idle keep-alive may take, and how large its headers may be. A slow or
// silent client is cut off instead of holding a connection, a goroutine and
// its buffers for ever; request bodies are bounded per route (bodyLimit).
type Limits struct {
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	MaxHeaderBytes                                            int
}

// DefaultLimits are the limits of `escrowd serve`.
var DefaultLimits = Limits{ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second,
	WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: maxHeaderBytes}

// HTTPServer is the http.Server that serves the API on addr within l.
func (s *Server) HTTPServer(addr string, l Limits) *http.Server {
	return &http.Server{Addr: addr, Handler: s.Handler(), ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout: l.ReadTimeout, WriteTimeout: l.WriteTimeout, IdleTimeout: l.IdleTimeout,
		MaxHeaderBytes: l.MaxHeaderBytes}
}
