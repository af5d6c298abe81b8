package httpapi

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// KeyUseInterval is how often one process records a key's use at most.
const KeyUseInterval = time.Minute

// KeyUses records when each API key was last used (table api_key_uses),
// for operators to find keys nobody uses any more. A process writes a
// key's use at most once per KeyUseInterval, in the background, so a
// request never waits for it and a busy key costs one write a minute; the
// recorded time is therefore up to that interval old. A failed write is
// logged and the next use after the interval tries again.
type KeyUses struct {
	pool  *pgxpool.Pool
	log   *zap.Logger
	every time.Duration

	mu      sync.Mutex
	written map[string]time.Time // key id → the last use this process wrote
	wg      sync.WaitGroup
}

// NewKeyUses records key uses in pool.
func NewKeyUses(pool *pgxpool.Pool, log *zap.Logger) *KeyUses {
	return &KeyUses{pool: pool, log: orNop(log), every: KeyUseInterval, written: map[string]time.Time{}}
}

// Used notes a use of keyID at at.
func (u *KeyUses) Used(keyID string, at time.Time) {
	if u == nil {
		return
	}
	u.mu.Lock()
	if last, ok := u.written[keyID]; ok && at.Sub(last) < u.every {
		u.mu.Unlock()
		return
	}
	u.written[keyID] = at
	u.wg.Add(1)
	u.mu.Unlock()
	go func() {
		defer u.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := u.pool.Exec(ctx, `INSERT INTO api_key_uses (key_id, last_used_at) VALUES ($1, $2)
			ON CONFLICT (key_id) DO UPDATE SET last_used_at = GREATEST(api_key_uses.last_used_at, EXCLUDED.last_used_at)`, keyID, at)
		if err != nil {
			u.log.Warn("recording an API key's use", zap.String("key_id", keyID), zap.Error(err))
			u.mu.Lock()
			if u.written[keyID].Equal(at) {
				delete(u.written, keyID) // the next use tries again
			}
			u.mu.Unlock()
		}
	}()
}

// Close waits for the writes under way.
func (u *KeyUses) Close() {
	if u != nil {
		u.wg.Wait()
	}
}
