package httpapi

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/projections"
)

// TestKeyExpiresAndItsLastUseIsListed: a key issued with a lifetime is
// accepted until the application's clock reaches its expiry, then refused
// with 401 Access denied, also when the auth cache holds it; its use is
// recorded outside the event log and listed with the merchant's keys.
func TestKeyExpiresAndItsLastUseIsListed(t *testing.T) {
	h := newHarness(t)
	var skew atomic.Int64
	h.svc.Engine.Now = func() time.Time { return time.Now().UTC().Add(time.Duration(skew.Load())) }
	ctx := context.Background()
	k, pos, err := h.svc.IssueKey(ctx, h.m.MerchantID, domain.Test, merchant.Standard, KeyDigest, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	h.wait(pos)
	if k.ExpiresAt.IsZero() {
		t.Fatal("the issued key shows no expiry")
	}
	h.do(req{path: "/v1/customers", key: k.Key}).expect(t, 200, "")
	h.do(req{path: "/v1/customers", key: k.Key}).expect(t, 200, "") // from the auth cache
	h.api.keyUses.wg.Wait()

	keys, err := projections.NewQueries(h.pool, nil).Keys(ctx, h.m.MerchantID)
	if err != nil {
		t.Fatal(err)
	}
	var listed *projections.KeyListing
	for i := range keys {
		if keys[i].KeyID == k.KeyID {
			listed = &keys[i]
		} else if keys[i].ExpiresAt != nil {
			t.Fatalf("key %s created without a lifetime lists an expiry", keys[i].KeyID)
		}
	}
	if listed == nil || listed.ExpiresAt == nil || !listed.ExpiresAt.Equal(k.ExpiresAt.Truncate(time.Microsecond)) || listed.LastUsedAt == nil {
		t.Fatalf("listed key %+v, issued %+v", listed, k)
	}

	skew.Store(int64(time.Hour))
	h.do(req{path: "/v1/customers", key: k.Key}).expect(t, 401, "Access denied")
	h.do(req{path: "/v1/customers", key: h.std()}).expect(t, 200, "")
}

// TestKeyUsesWriteOnceAMinute: a process records a key's use at most once
// per interval; a later use past it moves the recorded time.
func TestKeyUsesWriteOnceAMinute(t *testing.T) {
	pool := pgtest.NewPool(t)
	u := NewKeyUses(pool, nil)
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	recorded := func() time.Time {
		t.Helper()
		u.wg.Wait()
		var at time.Time
		if err := pool.QueryRow(context.Background(), `SELECT last_used_at FROM api_key_uses WHERE key_id = 'key_a'`).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at.UTC()
	}
	u.Used("key_a", t0)
	if got := recorded(); !got.Equal(t0) {
		t.Fatalf("recorded %s, want %s", got, t0)
	}
	u.Used("key_a", t0.Add(59*time.Second))
	if got := recorded(); !got.Equal(t0) {
		t.Fatalf("a use within the minute was written: %s", got)
	}
	u.Used("key_a", t0.Add(KeyUseInterval))
	if got := recorded(); !got.Equal(t0.Add(KeyUseInterval)) {
		t.Fatalf("a use a minute later was not written: %s", got)
	}
}
