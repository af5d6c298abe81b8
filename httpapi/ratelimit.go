package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
)

// rateWindow is the period the per-minute limit is expressed over.
const rateWindow = time.Minute

// rateSweepEvery bounds how often one limiter deletes idle rows, and
// rateSweepBatch how many it deletes at a time.
const (
	rateSweepEvery = time.Minute
	rateSweepBatch = 1000
)

// RateDecision is the outcome of one rate-limit check.
type RateDecision struct {
	Allowed   bool
	Limit     int
	Remaining int
	// Reset is how long until the full quota is available again.
	Reset time.Duration
	// RetryAfter is, for a denied request, how long until the next request
	// will be allowed (shorter than Reset: the quota refills gradually).
	RetryAfter time.Duration
}

// RateLimiter decides whether an API key may make one more request.
type RateLimiter interface {
	Allow(ctx context.Context, keyID string, now time.Time) (RateDecision, error)
}

// NewPGRateLimiter limits each key to perMinute requests per minute, shared
// by every server instance using the same database. perMinute <= 0 turns
// limiting off without touching the database.
//
// Algorithm: GCRA (the generic cell rate algorithm, a leaky bucket kept as a
// single timestamp). Each key has a "theoretical arrival time" tat; every
// allowed request pushes it one emission interval (window/limit) further,
// and a request is allowed while tat stays within one window of now. That
// allows a burst of the full limit and then one request per interval, with
// no fixed-window edge where a client gets twice the limit across a
// boundary and no synchronized resets. The whole decision is one upsert:
// PostgreSQL locks the key's row for it, so concurrent requests on any
// number of instances serialise on that row and never over-admit. State is
// one row per active key, and a row whose tat has passed means "full quota",
// the same as no row, so cleanup is a bounded delete of such rows.
//
// Instances use their own clocks (now is injected); they are assumed to be
// NTP-synchronised, skew only shifts a key's refill by that much.
func NewPGRateLimiter(pool *pgxpool.Pool, perMinute int) RateLimiter {
	if perMinute <= 0 {
		return rateUnlimited{}
	}
	// Rounding the interval down (to PostgreSQL's microseconds) keeps a
	// burst of exactly perMinute requests inside the window.
	interval := (rateWindow / time.Duration(perMinute)).Truncate(time.Microsecond)
	if interval <= 0 {
		interval = time.Microsecond
	}
	return &pgRateLimiter{pool: pool, limit: perMinute, interval: interval}
}

type rateUnlimited struct{}

func (rateUnlimited) Allow(context.Context, string, time.Time) (RateDecision, error) {
	return RateDecision{Allowed: true}, nil
}

type pgRateLimiter struct {
	pool      *pgxpool.Pool
	limit     int
	interval  time.Duration
	lastSweep atomic.Int64 // unix nanoseconds of the last cleanup
}

// gcraSQL: $1 key, $2 now, $3 the emission interval, $4 now + window.
// EXCLUDED.tat is now + interval, so greatest(r.tat + interval, EXCLUDED.tat)
// is max(tat, now) + interval: the tat after admitting this request.
const gcraSQL = `
INSERT INTO http_rate_limits AS r (key_id, tat, allowed)
VALUES ($1, $2::timestamptz + $3::interval, true)
ON CONFLICT (key_id) DO UPDATE SET
    tat = CASE WHEN greatest(r.tat + $3::interval, EXCLUDED.tat) <= $4::timestamptz
               THEN greatest(r.tat + $3::interval, EXCLUDED.tat)
               ELSE r.tat END,
    allowed = greatest(r.tat + $3::interval, EXCLUDED.tat) <= $4::timestamptz
RETURNING tat, allowed`

func (l *pgRateLimiter) Allow(ctx context.Context, keyID string, now time.Time) (RateDecision, error) {
	now = now.Truncate(time.Microsecond) // the database's precision
	var (
		tat     time.Time
		allowed bool
	)
	if err := l.pool.QueryRow(ctx, gcraSQL, keyID, now, l.interval, now.Add(rateWindow)).Scan(&tat, &allowed); err != nil {
		return RateDecision{}, fmt.Errorf("rate limit: %w", err)
	}
	l.maybeSweep(ctx, now)
	return l.decision(tat.Sub(now), allowed), nil
}

// decision derives the headers' numbers from how far tat is ahead of now.
func (l *pgRateLimiter) decision(ahead time.Duration, allowed bool) RateDecision {
	if ahead < 0 {
		ahead = 0
	}
	d := RateDecision{Allowed: allowed, Limit: l.limit, Reset: ahead}
	if allowed {
		d.Remaining = min(max(int((rateWindow-ahead)/l.interval), 0), l.limit)
		return d
	}
	// The next request fits once tat - now <= window - interval.
	d.RetryAfter = max(ahead-(rateWindow-l.interval), time.Microsecond)
	return d
}

// maybeSweep deletes keys back at full quota, at most once per
// rateSweepEvery per limiter and rateSweepBatch rows at a time. A window of
// margin absorbs clock skew between instances; SKIP LOCKED keeps it off rows
// being checked right now, and the outer predicate is re-checked on rows
// updated meanwhile. Failure only delays cleanup, so it is ignored.
func (l *pgRateLimiter) maybeSweep(ctx context.Context, now time.Time) {
	last := l.lastSweep.Load()
	if now.UnixNano()-last < int64(rateSweepEvery) || !l.lastSweep.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	cutoff := now.Add(-rateWindow)
	_, _ = l.pool.Exec(ctx, `
DELETE FROM http_rate_limits
WHERE key_id IN (SELECT key_id FROM http_rate_limits WHERE tat < $1
                 ORDER BY tat LIMIT $2 FOR UPDATE SKIP LOCKED)
  AND tat < $1`, cutoff, rateSweepBatch)
}

// WriteRateLimitHeaders sets the IETF draft (httpapi-ratelimit-headers)
// fields and, on a denial, Retry-After. perMinute <= 0 writes nothing.
func WriteRateLimitHeaders(h http.Header, d RateDecision, perMinute int) {
	if perMinute <= 0 {
		return
	}
	limit := d.Limit
	if limit <= 0 {
		limit = perMinute
	}
	h.Set("RateLimit", fmt.Sprintf("limit=%d, remaining=%d, reset=%d", limit, d.Remaining, rateCeilSeconds(d.Reset, 0)))
	h.Set("RateLimit-Policy", fmt.Sprintf("%d;w=%d", perMinute, int(rateWindow/time.Second)))
	if !d.Allowed {
		wait := d.RetryAfter
		if wait <= 0 {
			wait = d.Reset
		}
		h.Set("Retry-After", strconv.Itoa(rateCeilSeconds(wait, 1)))
	}
}

// rateCeilSeconds rounds d up to whole seconds, at least floor.
func rateCeilSeconds(d time.Duration, floor int) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, floor)
}

// tooManyRequestsBody is the 429 body: the public API sends no data field.
var tooManyRequestsBody = []byte(`{"status":429,"message":"Too many request"}`)

// TooManyRequests writes the 429 response with its headers.
func TooManyRequests(c echo.Context, d RateDecision, perMinute int) error {
	WriteRateLimitHeaders(c.Response().Header(), d, perMinute)
	return c.JSONBlob(http.StatusTooManyRequests, tooManyRequestsBody)
}
