package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/escrowd/escrowd/internal/pgtest"
)

var rlEpoch = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func rlAllow(t *testing.T, l RateLimiter, key string, now time.Time) RateDecision {
	t.Helper()
	d, err := l.Allow(context.Background(), key, now)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestRateLimiterBurstThenDenied(t *testing.T) {
	l := NewPGRateLimiter(pgtest.NewPool(t), 10)
	for i := 1; i <= 10; i++ {
		d := rlAllow(t, l, "key_a", rlEpoch)
		want := RateDecision{Allowed: true, Limit: 10, Remaining: 10 - i, Reset: time.Duration(i) * 6 * time.Second}
		if d != want {
			t.Fatalf("request %d: got %+v, want %+v", i, d, want)
		}
	}
	d := rlAllow(t, l, "key_a", rlEpoch.Add(time.Second))
	want := RateDecision{Allowed: false, Limit: 10, Remaining: 0, Reset: 59 * time.Second, RetryAfter: 5 * time.Second}
	if d != want {
		t.Fatalf("11th: got %+v, want %+v", d, want)
	}
	h := http.Header{}
	WriteRateLimitHeaders(h, d, 10)
	for k, v := range map[string]string{
		"RateLimit":        "limit=10, remaining=0, reset=59",
		"RateLimit-Policy": "10;w=60",
		"Retry-After":      "5",
	} {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

func TestRateLimiterKeysAreIndependent(t *testing.T) {
	l := NewPGRateLimiter(pgtest.NewPool(t), 2)
	rlAllow(t, l, "key_a", rlEpoch)
	rlAllow(t, l, "key_a", rlEpoch)
	if d := rlAllow(t, l, "key_a", rlEpoch); d.Allowed {
		t.Fatal("key_a: third request allowed")
	}
	if d := rlAllow(t, l, "key_b", rlEpoch); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("key_b: got %+v, want allowed with 1 remaining", d)
	}
}

func TestRateLimiterRefills(t *testing.T) {
	l := NewPGRateLimiter(pgtest.NewPool(t), 10)
	for range 10 {
		rlAllow(t, l, "key_a", rlEpoch)
	}
	if d := rlAllow(t, l, "key_a", rlEpoch.Add(5*time.Second)); d.Allowed {
		t.Fatal("allowed before one interval passed")
	}
	// One emission interval (6 s) later, exactly one more request fits.
	if d := rlAllow(t, l, "key_a", rlEpoch.Add(6*time.Second)); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("after 6s: got %+v, want allowed with 0 remaining", d)
	}
	if d := rlAllow(t, l, "key_a", rlEpoch.Add(6*time.Second)); d.Allowed || d.RetryAfter != 6*time.Second {
		t.Fatalf("after 6s, again: got %+v, want denied, retry after 6s", d)
	}
	// A full window after the last admission the whole quota is back.
	later := rlEpoch.Add(6*time.Second + time.Minute)
	for i := 1; i <= 10; i++ {
		if d := rlAllow(t, l, "key_a", later); !d.Allowed || d.Remaining != 10-i {
			t.Fatalf("next window request %d: got %+v", i, d)
		}
	}
	if d := rlAllow(t, l, "key_a", later); d.Allowed {
		t.Fatal("next window: 11th allowed")
	}
}

func TestRateLimiterOddLimitAdmitsWholeBurst(t *testing.T) {
	// 60 s / 7 is not a whole number of microseconds: rounding must not
	// cost the burst its last request.
	l := NewPGRateLimiter(pgtest.NewPool(t), 7)
	for i := 1; i <= 7; i++ {
		if d := rlAllow(t, l, "k", rlEpoch); !d.Allowed || d.Remaining != 7-i {
			t.Fatalf("request %d: %+v", i, d)
		}
	}
	if d := rlAllow(t, l, "k", rlEpoch); d.Allowed {
		t.Fatal("8th allowed")
	}
}

func TestRateLimiterAcrossInstances(t *testing.T) {
	url := pgtest.NewURL(t)
	var limiters []RateLimiter
	for range 2 {
		pool, err := pgxpool.New(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		limiters = append(limiters, NewPGRateLimiter(pool, 10))
	}
	var (
		allowed atomic.Int64
		next    atomic.Int64
		wg      sync.WaitGroup
	)
	const total = 50
	for g := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := limiters[g%2]
			for next.Add(1) <= total {
				d, err := l.Allow(context.Background(), "shared", rlEpoch)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := allowed.Load(); got != 10 {
		t.Fatalf("allowed %d of %d requests, want exactly 10", got, total)
	}
}

func TestRateLimiterSweepsIdleKeys(t *testing.T) {
	pool := pgtest.NewPool(t)
	l := NewPGRateLimiter(pool, 10)
	rlAllow(t, l, "idle", rlEpoch)
	// Two minutes on, "idle" is long back at full quota: the next check
	// (of another key) deletes its row.
	rlAllow(t, l, "busy", rlEpoch.Add(2*time.Minute))
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM http_rate_limits WHERE key_id = 'idle'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("idle key not swept")
	}
	if d := rlAllow(t, l, "idle", rlEpoch.Add(2*time.Minute)); !d.Allowed || d.Remaining != 9 {
		t.Fatalf("swept key: %+v, want a full quota", d)
	}
}

func TestRateLimiterOffNeverTouchesDatabase(t *testing.T) {
	l := NewPGRateLimiter(nil, 0) // a nil pool would panic if used
	for range 100 {
		if d := rlAllow(t, l, "k", rlEpoch); !d.Allowed {
			t.Fatal("denied with limiting off")
		}
	}
	h := http.Header{}
	WriteRateLimitHeaders(h, RateDecision{Allowed: true}, 0)
	if len(h) != 0 {
		t.Fatalf("headers written with limiting off: %v", h)
	}
}

func TestTooManyRequestsResponse(t *testing.T) {
	e := echo.New()
	rec := httptest.NewRecorder()
	c := e.NewContext(httptest.NewRequest(http.MethodPost, "/v1/x", nil), rec)
	d := RateDecision{Allowed: false, Limit: 10, Remaining: 0, Reset: 30*time.Second + time.Millisecond, RetryAfter: 200 * time.Millisecond}
	if err := TooManyRequests(c, d, 10); err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("status %d", rec.Code)
	}
	if got := rec.Body.String(); got != `{"status":429,"message":"Too many request"}` {
		t.Fatalf("body %q", got)
	}
	for k, v := range map[string]string{
		"RateLimit":        "limit=10, remaining=0, reset=31",
		"RateLimit-Policy": "10;w=60",
		"Retry-After":      "1", // rounded up, at least 1
		"Content-Type":     "application/json",
	} {
		if got := rec.Header().Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}
