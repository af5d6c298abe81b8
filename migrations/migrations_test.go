package migrations_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/migrations"
)

// appliedRow is one row of schema_migrations.
type appliedRow struct {
	name, checksum string
	at             time.Time
}

func applied(t *testing.T, pool *pgxpool.Pool) []appliedRow {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT name, checksum, applied_at FROM schema_migrations ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (appliedRow, error) {
		var a appliedRow
		return a, r.Scan(&a.name, &a.checksum, &a.at)
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// migratedPool is a pool on a fresh database migrated by Up.
func migratedPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	url := pgtest.NewEmptyURL(t)
	if err := up(t, url); err != nil {
		t.Fatal(err)
	}
	return pgtest.OpenPool(t, url)
}

func up(t *testing.T, url string) error {
	t.Helper()
	return migrations.Up(context.Background(), pgtest.OpenPool(t, url))
}

// A fresh database gets every migration, each recorded with the SHA-256
// of its file as it is on disk.
func TestUpFreshDatabase(t *testing.T) {
	pool := migratedPool(t)
	got := applied(t, pool)
	names := migrations.Names()
	if len(names) == 0 || len(got) != len(names) {
		t.Fatalf("recorded %v, want one row for each of %v", got, names)
	}
	for i, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if got[i].name != name || got[i].checksum != hex.EncodeToString(sum[:]) {
			t.Fatalf("row %d is %s %s, want %s %x", i, got[i].name, got[i].checksum, name, sum)
		}
	}
	var n int
	if err := pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_proc WHERE proname IN ('es_append', 'es_append_batch', 'projection_advance')`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d of the 3 functions after migrate (%v)", n, err)
	}
}

// Up on a migrated database changes nothing: no migration runs again (the
// baseline's CREATE TABLEs would fail if it did), no row is rewritten.
func TestUpAgainIsNoop(t *testing.T) {
	url := pgtest.NewEmptyURL(t)
	if err := up(t, url); err != nil {
		t.Fatal(err)
	}
	pool := pgtest.OpenPool(t, url)
	first := applied(t, pool)
	for range 2 {
		if err := up(t, url); err != nil {
			t.Fatalf("Up again: %v", err)
		}
	}
	if again := applied(t, pool); !slices.Equal(again, first) {
		t.Fatalf("Up again changed schema_migrations: %v, was %v", again, first)
	}
}

// Several processes starting at once on one fresh database migrate it
// once: every Up succeeds (a second run of the baseline would fail on its
// CREATE TABLEs) and each migration is recorded once.
func TestUpConcurrent(t *testing.T) {
	url := pgtest.NewEmptyURL(t)
	const n = 6
	pools := make([]*pgxpool.Pool, n)
	for i := range pools {
		pools[i] = pgtest.OpenPool(t, url)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range pools {
		wg.Go(func() {
			<-start
			errs[i] = migrations.Up(context.Background(), pools[i])
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Up %d: %v", i, err)
		}
	}
	if got := applied(t, pools[0]); len(got) != len(migrations.Names()) {
		t.Fatalf("recorded %v, want each of %v once", got, migrations.Names())
	}
}

// An applied migration whose recorded checksum differs from the embedded
// file (the file was edited after it was applied) stops Up before it does
// anything, with an error naming the file.
func TestChecksumMismatchRefused(t *testing.T) {
	url := pgtest.NewEmptyURL(t)
	if err := up(t, url); err != nil {
		t.Fatal(err)
	}
	pool := pgtest.OpenPool(t, url)
	name := migrations.Names()[0]
	tampered := strings.Repeat("0", 64)
	if _, err := pool.Exec(context.Background(), `UPDATE schema_migrations SET checksum = $1 WHERE name = $2`, tampered, name); err != nil {
		t.Fatal(err)
	}
	err := up(t, url)
	if !errors.Is(err, migrations.ErrChecksumMismatch) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), tampered) {
		t.Fatalf("Up after tampering with %s's checksum: %v; want ErrChecksumMismatch naming the file", name, err)
	}
	if got := applied(t, pool); got[0].checksum != tampered {
		t.Fatalf("the refused Up rewrote the record: %v", got)
	}
}

// historyFiles are the migrations the baseline replaced, kept as test data.
func historyFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "history", "*.sql"))
	if err != nil || len(files) != 15 {
		t.Fatalf("history: %v (%v), want the 15 replaced migrations", files, err)
	}
	return files // Glob sorts
}

// migrateHistory brings an empty database to where the replaced
// migrations left it, exactly as their Up did: each file in its own
// transaction, recorded by name in a schema_migrations without checksums.
func migrateHistory(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE schema_migrations (
		name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for _, f := range historyFiles(t) {
		sql, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, string(sql)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (name) VALUES ($1)`, filepath.Base(f))
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
}

// A database migrated by the replaced migrations (the development
// databases under ./.data) is refused with ErrPreBaseline, an error that
// says to recreate it, and left exactly as it was.
func TestPreBaselineDatabaseRefused(t *testing.T) {
	url := pgtest.NewEmptyURL(t)
	migrateHistory(t, url)
	err := up(t, url)
	if !errors.Is(err, migrations.ErrPreBaseline) {
		t.Fatalf("Up on a database of the replaced migrations: %v; want ErrPreBaseline", err)
	}
	for _, want := range []string{"15 recorded", "0015_idempotency_expiry.sql", "recreate the database", "scripts/pg.sh clean"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not say %q", err, want)
		}
	}
	pool := pgtest.OpenPool(t, url)
	var n int
	var checksum bool
	if err := pool.QueryRow(context.Background(), `
		SELECT (SELECT count(*) FROM schema_migrations),
		       EXISTS (SELECT 1 FROM information_schema.columns WHERE table_name = 'schema_migrations' AND column_name = 'checksum')`,
	).Scan(&n, &checksum); err != nil || n != 15 || checksum {
		t.Fatalf("after the refusal: %d rows, checksum column %v (%v); want the 15 old rows untouched", n, checksum, err)
	}
}
