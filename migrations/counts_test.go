package migrations_test

import (
	"context"
	"testing"

	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/migrations"
)

// A database whose listing counts were created with the partial index of
// the counts at zero (the projectors' DDL before 0004) loses it: without
// it every move of a count is a heap-only update.
func TestCountsLoseTheIndexOfSpentCounts(t *testing.T) {
	url := pgtest.NewEmptyURL(t)
	if err := up(t, url); err != nil {
		t.Fatal(err)
	}
	pool := pgtest.OpenPool(t, url)
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
	var left []string
	rows, err := pool.Query(ctx, `SELECT indexname FROM pg_indexes WHERE indexname LIKE '%\_spent'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		left = append(left, name)
	}
	if len(left) != 0 {
		t.Fatalf("indexes of spent counts left after migrating: %v", left)
	}
}
