package projections

import (
	"context"
	"testing"

	"github.com/escrowd/escrowd/internal/pgtest"
)

// TestMerchantsKeepNoSigningSecret: the merchants' read model of a database
// that kept copies of the signing secrets loses them when its schema is
// applied (as every projector start does).
func TestMerchantsKeepNoSigningSecret(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE rm_merchants (merchant_id text PRIMARY KEY, name text NOT NULL, business boolean NOT NULL,
		country text NOT NULL, fees jsonb NOT NULL, webhook_test text NOT NULL DEFAULT '', webhook_live text NOT NULL DEFAULT '',
		secret_test text NOT NULL DEFAULT '', secret_live text NOT NULL DEFAULT '', allowlist text[] NOT NULL DEFAULT '{}', created_at timestamptz NOT NULL);
		INSERT INTO rm_merchants (merchant_id, name, business, country, fees, secret_test, created_at)
		VALUES ('m1', 'Shop', false, 'NG', '{}', 'whsec_kept_in_plain_text', now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, Merchants{}.Schema()); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns WHERE table_name = 'rm_merchants' AND column_name LIKE 'secret%'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d secret columns left (%v)", n, err)
	}
	var name string
	if err := pool.QueryRow(ctx, `SELECT name FROM rm_merchants WHERE merchant_id = 'm1'`).Scan(&name); err != nil || name != "Shop" {
		t.Fatalf("the merchant's row: %q %v", name, err)
	}
}
