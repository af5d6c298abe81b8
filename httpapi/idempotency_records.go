// The idempotency records in PostgreSQL: reserving a key, reading and
// releasing its record, sweeping expired ones.

package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
)

// storedResponse is a completed (or in-flight) record.
type storedResponse struct {
	fingerprint []byte
	owner       []byte
	createdAt   time.Time
	expiresAt   time.Time
	complete    bool
	status      int
	headers     http.Header
	body        []byte
	// erased: the answer was sealed with a customer's key, since
	// destroyed (customer forget); body is empty.
	erased bool
}

// reserve inserts an in-flight row; it reports whether this request now owns
// the key (false: the key has a row already).
func (s *IdempotencyStore) reserve(ctx context.Context, scope, key string, fp, owner []byte, now time.Time) (bool, error) {
	var one int
	err := s.pool.QueryRow(ctx, `
INSERT INTO http_idempotency_keys (key_id, idempotency_key, fingerprint, owner, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (key_id, idempotency_key) DO NOTHING
RETURNING 1`, scope, key, fp, owner, now, now.Add(idempotencyTTL)).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("idempotency reservation: %w", err)
	}
	return true, nil
}

func (s *IdempotencyStore) load(ctx context.Context, scope, key string) (storedResponse, bool, error) {
	var (
		rec    storedResponse
		status *int32
	)
	err := s.pool.QueryRow(ctx, `
SELECT fingerprint, owner, created_at, expires_at, completed_at IS NOT NULL, status, headers, body
FROM http_idempotency_keys WHERE key_id = $1 AND idempotency_key = $2`, scope, key).
		Scan(&rec.fingerprint, &rec.owner, &rec.createdAt, &rec.expiresAt, &rec.complete, &status, &rec.headers, &rec.body)
	if errors.Is(err, pgx.ErrNoRows) {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, fmt.Errorf("idempotency load: %w", err)
	}
	if status != nil {
		rec.status = int(*status)
	}
	if rec.body, rec.erased, err = s.openBody(ctx, scope, key, rec.body); err != nil {
		return rec, false, err
	}
	return rec, true, nil
}

// bodyPlace is where a record's answer is kept, which its sealed form is
// bound to: a sealed answer moved to another record does not open.
func bodyPlace(scope, key string) string {
	return "http_idempotency_keys.body\x00" + scope + "\x00" + key
}

// sealBody is the answer to keep, sealed with owner's data key.
func (s *IdempotencyStore) sealBody(ctx context.Context, owner domain.DataOwner, scope, key string, body []byte) ([]byte, error) {
	if s.sealer == nil || len(body) == 0 {
		return body, nil
	}
	// A destroyed key seals nothing: the answer is kept as domain.Erased,
	// which a retry is told of.
	sealed, err := s.sealer.Seal(ctx, owner, bodyPlace(scope, key), string(body))
	if err != nil {
		return nil, err
	}
	return []byte(sealed), nil
}

// openBody is a kept answer as it was sent; erased when its key was
// destroyed, before or after the answer was kept (an answer is a JSON
// envelope, never domain.Erased itself).
func (s *IdempotencyStore) openBody(ctx context.Context, scope, key string, body []byte) ([]byte, bool, error) {
	if s.sealer == nil || len(body) == 0 {
		return body, false, nil
	}
	plain, err := s.sealer.Open(ctx, bodyPlace(scope, key), string(body))
	if err != nil {
		return nil, false, fmt.Errorf("idempotency: opening the kept answer: %w", err)
	}
	if plain == domain.Erased {
		return nil, true, nil
	}
	return []byte(plain), false, nil
}

// keepReserved renews this request's reservation every heartbeat until
// stop is called: a reservation is taken for abandoned when it was last
// renewed idempotencyAbandonAfter ago, which a request still working must
// never look like. A successor's row (another owner) or a completed one is
// left alone.
func (s *IdempotencyStore) keepReserved(ctx context.Context, scope, key string, owner []byte) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(s.heartbeat)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if _, err := s.pool.Exec(ctx, `UPDATE http_idempotency_keys SET created_at = $4
WHERE key_id = $1 AND idempotency_key = $2 AND owner = $3 AND completed_at IS NULL`, scope, key, owner, s.now()); err != nil {
				s.log.Warn("renewing an idempotency reservation", zap.Error(err))
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// release deletes this request's reservation (not a successor's).
func (s *IdempotencyStore) release(ctx context.Context, scope, key string, owner []byte) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `DELETE FROM http_idempotency_keys
WHERE key_id = $1 AND idempotency_key = $2 AND owner = $3`, scope, key, owner); err != nil {
		s.log.Error("idempotency: releasing key", zap.Error(err), zap.String("key_id", scope))
	}
}

// maybeSweep deletes expired keys, once per idempotencySweepEvery per store
// and at once again while the previous sweep left a backlog; one sweep of a
// store runs at a time.
func (s *IdempotencyStore) maybeSweep(ctx context.Context, now time.Time) {
	last := s.lastSweep.Load()
	if !s.backlog.Load() && now.UnixNano()-last < int64(idempotencySweepEvery) {
		return
	}
	if !s.sweeping.CompareAndSwap(false, true) {
		return
	}
	defer s.sweeping.Store(false)
	s.lastSweep.Store(now.UnixNano())
	n, err := s.sweep(ctx, now, idempotencySweepRounds)
	s.backlog.Store(err == nil && n == idempotencySweepRounds*idempotencySweepBatch)
	if err != nil {
		s.log.Warn("idempotency: sweeping expired keys", zap.Error(err))
	}
}

// sweep deletes up to rounds batches of keys expired at now and returns how
// many it deleted; it stops at the first batch that is not full.
func (s *IdempotencyStore) sweep(ctx context.Context, now time.Time, rounds int) (int64, error) {
	var total int64
	for range rounds {
		tag, err := s.pool.Exec(ctx, `
DELETE FROM http_idempotency_keys
WHERE (key_id, idempotency_key) IN (
        SELECT key_id, idempotency_key FROM http_idempotency_keys
        WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)
  AND expires_at <= $1`, now, idempotencySweepBatch)
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < idempotencySweepBatch {
			break
		}
	}
	return total, nil
}
