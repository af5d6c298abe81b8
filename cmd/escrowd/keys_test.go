package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/projections"
)

// TestKeyCreateExpiresInAndKeyList: `key create --expires-in` prints the
// expiry it recorded, and `key list` shows every key of the merchant with
// its expiry, revocation and last use (none yet).
func TestKeyCreateExpiresInAndKeyList(t *testing.T) {
	db := pgtest.NewURL(t)
	m := cliCreatedMerchant(t, db, "Acme")
	before := time.Now()
	out, err := cli(t, db, "key", "create", "--merchant", m.MerchantID, "--expires-in", "720h")
	if err != nil {
		t.Fatal(err)
	}
	var k app.IssuedKey
	if err := json.Unmarshal([]byte(out), &k); err != nil {
		t.Fatal(err)
	}
	if k.ExpiresAt.Before(before.Add(720*time.Hour)) || k.ExpiresAt.After(time.Now().Add(720*time.Hour)) {
		t.Fatalf("expiresAt %s, want 720h after issue", k.ExpiresAt)
	}
	for _, bad := range []string{"-1h", "30s"} {
		if _, err := cli(t, db, "key", "create", "--merchant", m.MerchantID, "--expires-in", bad); err == nil || !strings.Contains(err.Error(), "--expires-in") {
			t.Fatalf("--expires-in %s: %v", bad, err)
		}
	}
	if _, err := cli(t, db, "key", "revoke", "--merchant", m.MerchantID, "--key-id", m.Keys[0].KeyID); err != nil {
		t.Fatal(err)
	}
	out, err = cli(t, db, "key", "list", "--merchant", m.MerchantID, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var keys []projections.KeyListing
	if err := json.Unmarshal([]byte(out), &keys); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(keys) != 5 {
		t.Fatalf("listed %d keys, want 5: %s", len(keys), out)
	}
	for _, l := range keys {
		switch {
		case l.LastUsedAt != nil:
			t.Fatalf("key %s never used lists a last use", l.KeyID)
		case l.KeyID == k.KeyID && (l.ExpiresAt == nil || !l.ExpiresAt.Equal(k.ExpiresAt.Truncate(time.Microsecond))):
			t.Fatalf("listed expiry %v, issued %s", l.ExpiresAt, k.ExpiresAt)
		case l.KeyID != k.KeyID && l.ExpiresAt != nil:
			t.Fatalf("key %s lists an expiry", l.KeyID)
		case (l.KeyID == m.Keys[0].KeyID) != l.Revoked:
			t.Fatalf("key %s revoked %v", l.KeyID, l.Revoked)
		}
	}
	table, err := cli(t, db, "key", "list", "--merchant", m.MerchantID)
	if err != nil || !strings.Contains(table, k.KeyID) || !strings.Contains(table, "revoked") || !strings.Contains(table, "LAST USED") {
		t.Fatalf("key list: %v\n%s", err, table)
	}
	if _, err := cli(t, db, "key", "list", "--merchant", "nope"); err == nil || !strings.Contains(err.Error(), "Merchant not found") {
		t.Fatalf("unknown merchant: %v", err)
	}
}
