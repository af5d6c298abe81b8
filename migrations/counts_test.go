package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/migrations"
)

// A database whose listing counts were created with the partial index of
// the counts at zero (the projectors' DDL before 0004) loses it: without
// it every move of a count is a heap-only update.
func TestCountsLoseTheIndexOfSpentCounts(t *testing.T) {
	pool := migratedPool(t)
	ctx := context.Background()
	tables := []string{"rm_escrow_counts", "rm_transaction_counts", "rm_customer_counts", "rm_category_counts"}
	for _, table := range tables {
		if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (merchant_id text NOT NULL, environment text NOT NULL,
			key text NOT NULL, bucket bigint NOT NULL, n bigint NOT NULL, PRIMARY KEY (merchant_id, environment, key, bucket));
			CREATE INDEX `+table+`_spent ON `+table+` (merchant_id) WHERE n = 0`); err != nil {
			t.Fatal(err)
		}
	}
	// As if the database had been migrated before 0004 existed.
	if _, err := pool.Exec(ctx, `DELETE FROM schema_migrations WHERE name = '0004_counts_heap_only.sql'`); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if left := indexesNamed(t, pool, `%\_spent`); len(left) != 0 {
		t.Fatalf("indexes of spent counts left after migrating: %v", left)
	}
}

// A database whose escrows and records were created with btree indexes on
// their creation time (the projectors' DDL before 0005) loses them: listings
// page by position, and date ranges read the block range indexes the
// projectors create.
func TestReadModelsLoseTheirCreationTimeBtrees(t *testing.T) {
	pool := migratedPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `
		CREATE TABLE rm_escrows (id text PRIMARY KEY, merchant_id text, environment text, seller_id text, buyer_id text,
			created_at timestamptz, seq bigserial);
		CREATE INDEX rm_escrows_merchant ON rm_escrows (merchant_id, environment, created_at DESC, seq DESC);
		CREATE INDEX rm_escrows_seller ON rm_escrows (seller_id, created_at DESC) WHERE seller_id <> '';
		CREATE INDEX rm_escrows_buyer ON rm_escrows (buyer_id, created_at DESC) WHERE buyer_id <> '';
		CREATE TABLE rm_transactions (id text PRIMARY KEY, merchant_id text, environment text, customer_id text,
			created_at timestamptz, seq bigserial);
		CREATE INDEX rm_transactions_customer ON rm_transactions (customer_id, created_at DESC, seq DESC) WHERE customer_id IS NOT NULL;
		CREATE INDEX rm_transactions_merchant ON rm_transactions (merchant_id, environment, created_at DESC, seq DESC) WHERE customer_id IS NULL;
		DELETE FROM schema_migrations WHERE name = '0005_date_ranges_brin.sql'`); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if left := indexesNamed(t, pool, `rm\_%`); len(left) != 2 { // the primary keys
		t.Fatalf("indexes left after migrating: %v", left)
	}
}

// indexesNamed lists the indexes whose names are LIKE pattern.
func indexesNamed(t *testing.T, pool *pgxpool.Pool, pattern string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT indexname FROM pg_indexes WHERE indexname LIKE $1 ORDER BY 1`, pattern)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}
