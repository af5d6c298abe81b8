package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/internal/app"
)

// Idempotency-Key handling, after Stripe: the first
// request with a key reserves it and runs; its response is stored and replayed
// byte for byte to every repeat with the same request for 24 hours.
const (
	headerIdempotencyKey      = "Idempotency-Key"
	headerIdempotencyReplayed = "Idempotency-Replayed"
	maxIdempotencyKeyLen      = 255
	// idempotencyTTL is how long a key is remembered.
	idempotencyTTL = 24 * time.Hour
	// idempotencyRefusalTTL is how long a 4xx answer of a request that
	// wrote nothing is remembered: long enough for a client's retries to
	// be replayed, short enough that refusals cannot pile up for a day.
	// Running such a request again moves nothing twice: it moved nothing.
	idempotencyRefusalTTL = time.Hour
	// idempotencyAbandonAfter is how long a reservation may stay in flight before
	// it is presumed to belong to a crashed process and may be taken over.
	idempotencyAbandonAfter = 2 * time.Minute
	// idempotencyHeartbeat is how often a running request renews its
	// reservation, so one that works longer than idempotencyAbandonAfter is
	// not taken for abandoned while it runs.
	idempotencyHeartbeat  = idempotencyAbandonAfter / 4
	idempotencySweepEvery = time.Minute
	idempotencySweepBatch = 500
	// idempotencySweepRounds bounds the batches one sweep deletes; a sweep
	// that used them all left expired rows behind, and the next request
	// sweeps again at once instead of a minute later, so removal keeps pace
	// with any rate of keyed requests.
	idempotencySweepRounds = 4
	// idempotencyReserveAttempts bounds the reservation/read loop: a read can miss a
	// row its owner just released, and then the reservation is tried again.
	idempotencyReserveAttempts = 3
)

const (
	msgIdempotencyKeyTooLong  = "Idempotency-Key must be at most 255 characters"
	msgIdempotencyKeyMismatch = "Idempotency key reused with a different request"
	msgIdempotencyInProgress  = "A request with this idempotency key is in progress"
	msgIdempotencyOutcomeLost = "A request with this idempotency key was executed but its response was lost; read the resource to see the outcome"
	msgIdempotencyErased      = "The response kept for this idempotency key was erased with the customer's personal data; read the resource to see the outcome"
)

// IdempotencyStore keeps Idempotency-Key records in PostgreSQL, so every
// server instance sharing the database honours them.
type IdempotencyStore struct {
	pool      *pgxpool.Pool
	fencer    ReservationFencer
	sealer    domain.Sealer
	now       func() time.Time
	heartbeat time.Duration
	log       *zap.Logger
	lastSweep atomic.Int64
	// sweeping: a sweep of this store runs; backlog: the last one stopped
	// at idempotencySweepRounds with expired rows left.
	sweeping, backlog atomic.Bool
}

// IdempotencyOption configures an IdempotencyStore.
type IdempotencyOption func(*IdempotencyStore)

// WithIdempotencyClock injects the clock (tests).
func WithIdempotencyClock(now func() time.Time) IdempotencyOption {
	return func(s *IdempotencyStore) { s.now = now }
}

// WithIdempotencyHeartbeat sets how often a running request renews its
// reservation (tests).
func WithIdempotencyHeartbeat(d time.Duration) IdempotencyOption {
	return func(s *IdempotencyStore) { s.heartbeat = d }
}

// WithIdempotencyLogger logs the failures that cannot reach the client
// (storing a response that was already sent, cleanup).
func WithIdempotencyLogger(l *zap.Logger) IdempotencyOption {
	return func(s *IdempotencyStore) { s.log = l }
}

// ReservationFencer ties idempotency reservations to the writes made under them (see
// app.Reservation); *app.Engine is one.
type ReservationFencer interface {
	FenceReservation(ctx context.Context, owner []byte, keyID, key string, meta domain.Meta) (wrote bool, err error)
}

// WithIdempotencyFence makes every command a request runs write under its
// reservation, so a retry that takes an abandoned reservation over never runs a request
// that already wrote. Without it a takeover cannot tell.
func WithIdempotencyFence(f ReservationFencer) IdempotencyOption {
	return func(s *IdempotencyStore) { s.fencer = f }
}

// WithIdempotencySealer keeps the answers sealed with the merchant's data
// key: an answer holds what the request was about (a customer's name,
// email and phone, an account paid out to), which no table holds in plain
// text. Without it answers are kept as sent.
func WithIdempotencySealer(s domain.Sealer) IdempotencyOption {
	return func(st *IdempotencyStore) { st.sealer = s }
}

// NewIdempotencyStore returns a store on pool.
func NewIdempotencyStore(pool *pgxpool.Pool, opts ...IdempotencyOption) *IdempotencyStore {
	s := &IdempotencyStore{pool: pool, now: time.Now, heartbeat: idempotencyHeartbeat, log: zap.NewNop()}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Middleware applies Idempotency-Key to POST, PUT, PATCH and DELETE requests
// of an authenticated principal; it must run after auth and the body limit.
// Requests without the header, or without a principal, pass through.
func (s *IdempotencyStore) Middleware() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			key := req.Header.Get(headerIdempotencyKey)
			if key == "" || !idempotentMethod(req.Method) {
				return next(c)
			}
			if utf8.RuneCountInString(key) > maxIdempotencyKeyLen {
				return writeIdempotencyError(c, http.StatusBadRequest, msgIdempotencyKeyTooLong)
			}
			p, ok := PrincipalFrom(c)
			if !ok || p.KeyID == "" {
				return next(c)
			}
			fp, sp, err := s.spoolBody(req)
			if err != nil {
				return err
			}
			defer sp.remove()
			return s.serve(c, next, p, key, fp)
		}
	}
}

func idempotentMethod(m string) bool {
	switch m {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

func (b replayBody) Close() error { return b.orig.Close() }

// idempotencyScope is whose keys a key is among: the API key's, and within
// it the acting customer's, as Stripe scopes keys to the account a request
// acts for. Two customers of one merchant key may pick the same
// Idempotency-Key; neither is ever answered with the other's outcome. The
// acting customer is the one auth resolved, not the raw customer-id
// header: a route that ignores the header acts for the merchant whatever
// it says, so the header must not make a retry a different request.
func idempotencyScope(c echo.Context, keyID string) string {
	if cu, ok := CustomerFrom(c); ok && cu.ID != "" {
		return keyID + " customer:" + cu.ID
	}
	return keyID
}

func (s *IdempotencyStore) serve(c echo.Context, next echo.HandlerFunc, p Principal, key string, fp []byte) error {
	ctx := c.Request().Context()
	scope := idempotencyScope(c, p.KeyID)
	for range idempotencyReserveAttempts {
		now := s.now()
		s.maybeSweep(ctx, now)
		owner := make([]byte, 16)
		_, _ = rand.Read(owner)
		reserved, err := s.reserve(ctx, scope, key, fp, owner, now)
		if err != nil {
			return err
		}
		if reserved {
			return s.execute(c, next, p.MerchantID, scope, key, owner)
		}
		rec, found, err := s.load(ctx, scope, key)
		if err != nil {
			return err
		}
		if !found {
			continue // released (failed or swept) since our reservation: reserve again
		}
		expired := !rec.expiresAt.After(now)
		sameRequest := bytes.Equal(rec.fingerprint, fp)
		abandoned := !rec.complete && sameRequest && !rec.createdAt.After(now.Add(-idempotencyAbandonAfter))
		switch {
		case expired || abandoned:
			taken, err := s.takeOver(c, p, scope, key, fp, owner, rec, expired, now)
			if err != nil {
				return err
			}
			switch taken {
			case tookOver:
				return s.execute(c, next, p.MerchantID, scope, key, owner)
			case answered:
				return nil
			}
			continue // another retry changed the row first
		case !sameRequest:
			return writeIdempotencyError(c, http.StatusConflict, msgIdempotencyKeyMismatch)
		case !rec.complete:
			return writeIdempotencyError(c, http.StatusConflict, msgIdempotencyInProgress)
		case rec.erased:
			return writeIdempotencyError(c, http.StatusGone, msgIdempotencyErased)
		}
		return replayStored(c, rec)
	}
	return writeIdempotencyError(c, http.StatusConflict, msgIdempotencyInProgress)
}

type takeOverOutcome int

const (
	lostRace takeOverOutcome = iota // the row changed: look again
	tookOver                        // this request owns the key: run it
	answered                        // the request had run: its outcome was answered
)

// takeOver reserves a key whose row has expired (any request may) or whose
// in-flight reservation was abandoned (a retry of the same request). An in-flight
// reservation is fenced first, so its request can never write after this point;
// if it already wrote, a retry of it is not run again but answered that
// the outcome was lost.
func (s *IdempotencyStore) takeOver(c echo.Context, p Principal, scope, key string, fp, owner []byte, old storedResponse, expired bool, now time.Time) (takeOverOutcome, error) {
	ctx := c.Request().Context()
	wrote := false
	if !old.complete && s.fencer != nil {
		var err error
		wrote, err = s.fencer.FenceReservation(ctx, old.owner, scope, key, domain.Meta{MerchantID: p.MerchantID,
			Environment: domain.Environment(p.Environment), Actor: p.KeyID, RequestID: c.Request().Header.Get("X-Request-Id")})
		if err != nil {
			return lostRace, fmt.Errorf("idempotency fence: %w", err)
		}
	}
	if wrote && !expired {
		rec := lostOutcome()
		tag, err := s.pool.Exec(ctx, `
UPDATE http_idempotency_keys SET owner = $4, status = $5, headers = $6, body = $7, completed_at = $8
WHERE key_id = $1 AND idempotency_key = $2 AND owner = $3 AND completed_at IS NULL`,
			scope, key, old.owner, owner, rec.status, rec.headers, rec.body, now)
		if err != nil {
			return lostRace, fmt.Errorf("idempotency outcome: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return lostRace, nil
		}
		s.log.Error("idempotency: a request wrote but its response was never stored",
			zap.String("idempotency_key", key), reqField(c))
		return answered, replayStored(c, rec)
	}
	tag, err := s.pool.Exec(ctx, `
UPDATE http_idempotency_keys
SET fingerprint = $4, owner = $5, created_at = $6, expires_at = $8, completed_at = NULL, status = NULL, headers = NULL, body = NULL
WHERE key_id = $1 AND idempotency_key = $2 AND owner = $3 AND (completed_at IS NOT NULL) = $7`,
		scope, key, old.owner, fp, owner, now, old.complete, now.Add(idempotencyTTL))
	if err != nil {
		return lostRace, fmt.Errorf("idempotency takeover: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return lostRace, nil
	}
	return tookOver, nil
}

// lostOutcome is the stored answer for a request that wrote and then died
// before its response was stored: running it again could move money twice.
func lostOutcome() storedResponse {
	body, _ := json.Marshal(idempotencyErrorBody{Status: http.StatusConflict, Message: msgIdempotencyOutcomeLost})
	return storedResponse{complete: true, status: http.StatusConflict,
		headers: http.Header{echo.HeaderContentType: {echo.MIMEApplicationJSON}}, body: append(body, '\n')}
}

// execute runs the handler under a reservation, capturing what it sends. Errors
// are rendered here (c.Error) so the real status is known: 4xx outcomes are
// stored and replayed like successes (for idempotencyRefusalTTL only when
// the request wrote nothing); 5xx, a panic or a lost reservation release the key
// so the client can retry.
func (s *IdempotencyStore) execute(c echo.Context, next echo.HandlerFunc, merchantID, scope, key string, owner []byte) error {
	res := c.Response()
	before := res.Header().Clone()
	capture := &captureWriter{ResponseWriter: res.Writer}
	res.Writer = capture
	done := false
	// The response may be gone to the client while the request context is
	// cancelled; recording it must not be.
	ctx := context.WithoutCancel(c.Request().Context())
	stopRenewing := s.keepReserved(ctx, scope, key, owner)
	defer stopRenewing()
	reservation := app.NewReservation(owner, scope, key)
	if s.fencer != nil {
		req := c.Request()
		c.SetRequest(req.WithContext(app.WithReservation(req.Context(), reservation)))
	}
	defer func() {
		res.Writer = capture.ResponseWriter
		// Panicking: the recover middleware answers 500. A request that
		// wrote keeps its reservation; a retry finds it abandoned and fenced.
		if !done && !reservation.Wrote() && !reservation.OutcomeUnknown() {
			s.release(ctx, scope, key, owner)
		}
	}()
	err := next(c)
	if err != nil {
		c.Error(err)
	}
	done = true
	status := capture.status
	if status == 0 { // nothing written: net/http will send an empty 200
		status = http.StatusOK
		capture.header = res.Header().Clone()
	}
	// A server error that changed nothing releases the key for a retry, and
	// so does one whose repeat resumes the request (domain.IsResumable);
	// any other after a write (the read models lagging behind a saved
	// change) is the outcome, stored and replayed like any other.
	if status >= http.StatusInternalServerError && reservation.OutcomeUnknown() {
		// An append may have committed without our knowing: the key stays
		// in flight, so a retry waits for the takeover, whose fence tells
		// whether the request wrote, instead of running it again.
		s.log.Warn("idempotency: a write's outcome is unknown; the key stays in flight until a retry takes it over", reqField(c))
		return nil
	}
	if status >= http.StatusInternalServerError && (!reservation.Wrote() || domain.IsResumable(err)) {
		s.release(ctx, scope, key, owner)
		return nil
	}
	headers := handlerHeaders(before, capture.header)
	doneAt := s.now()
	var expires *time.Time // nil: as reserved, idempotencyTTL after the reservation
	if status >= 400 && status < 500 && !reservation.Wrote() {
		e := doneAt.Add(idempotencyRefusalTTL)
		expires = &e
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	body, err := s.sealBody(sctx, answerOwner(c, merchantID, status, capture.body.Bytes()), scope, key, capture.body.Bytes())
	if err != nil {
		s.log.Error("idempotency: sealing response", zap.Error(err), reqField(c))
		return nil
	}
	_, err = s.pool.Exec(sctx, `
UPDATE http_idempotency_keys
SET status = $4, headers = $5, body = $6, completed_at = $7, expires_at = coalesce($8, expires_at)
WHERE key_id = $1 AND idempotency_key = $2 AND owner = $3`,
		scope, key, owner, status, headers, body, doneAt, expires)
	if err != nil {
		// The client has its answer; a retry finds the key in flight until
		// it is presumed abandoned, rather than running the request twice.
		s.log.Error("idempotency: storing response", zap.Error(err), reqField(c))
	}
	return nil
}

// answerOwner is whose data key seals the answer a request of merchantID
// was given: a successful answer about one customer (the customer-id the
// request named, or the customer the answer is about: the one it created)
// is theirs, so that forgetting them erases it; any other is the
// merchant's. A refusal's customer-id may name no customer at all, so it
// makes no key.
func answerOwner(c echo.Context, merchantID string, status int, body []byte) domain.DataOwner {
	if status < 200 || status >= 300 {
		return domain.MerchantData(merchantID)
	}
	cid := strings.TrimSpace(c.Request().Header.Get("customer-id"))
	if cid == "" {
		var answer struct {
			Data struct {
				CustomerID string `json:"customerId"`
			} `json:"data"`
		}
		if json.Unmarshal(body, &answer) == nil {
			cid = answer.Data.CustomerID
		}
	}
	if cid == "" {
		return domain.MerchantData(merchantID)
	}
	return domain.CustomerData(cid)
}

// idempotencyErrorBody is the error envelope; written directly so these
// answers do not depend on the server's error handler.
type idempotencyErrorBody struct {
	Status  int      `json:"status"`
	Message string   `json:"message"`
	Data    struct{} `json:"data"`
}

func writeIdempotencyError(c echo.Context, status int, msg string) error {
	return c.JSON(status, idempotencyErrorBody{Status: status, Message: msg})
}
