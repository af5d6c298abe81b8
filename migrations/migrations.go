// Package migrations holds the database schema as ordered, embedded SQL files
// and applies the ones not yet recorded, under an advisory lock so several
// processes starting at once migrate exactly once.
//
// 0001_baseline.sql creates the whole schema. A change to the schema is a new
// file (0002_..., applied in name order), never an edit of an applied one:
// schema_migrations records each applied file's SHA-256, and Up refuses to
// run when an embedded file no longer matches what was applied.
package migrations

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed *.sql
var files embed.FS

// lockKey is an arbitrary constant shared by every escrowd process.
const lockKey = 7_242_001

// ErrChecksumMismatch is returned (wrapped, naming the file) by Up when a
// migration recorded as applied differs from the file embedded in this
// binary.
var ErrChecksumMismatch = errors.New("migrations: an applied migration was edited")

// ErrPreBaseline is returned (wrapped) by Up on a database migrated by the
// migrations that 0001_baseline.sql replaced (0001_eventstore.sql …
// 0015_idempotency_expiry.sql, whose schema_migrations has no checksums).
// Such databases were throwaway development databases; they are not
// upgraded in place.
var ErrPreBaseline = errors.New("migrations: the database was migrated by the migrations the baseline replaced")

// Names lists the migration files in the order they apply.
func Names() []string {
	entries, _ := fs.ReadDir(files, ".")
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sql") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

// Fingerprint identifies the schema by the contents of every migration
// (used to name test template databases, so an edited migration never
// reuses a stale template).
func Fingerprint() string {
	h := sha256.New()
	for _, name := range Names() {
		b, _ := files.ReadFile(name)
		h.Write([]byte(name))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Checksum is the SHA-256 (hex) of the named embedded migration, as Up
// records it.
func Checksum(name string) (string, error) {
	b, err := files.ReadFile(name)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// Up applies every pending migration, each in its own transaction with its
// checksum. Before applying anything it checks the database: every applied
// migration that this binary embeds must have the checksum recorded when it
// was applied (ErrChecksumMismatch otherwise), and a database of the
// replaced migrations is refused (ErrPreBaseline). Applied migrations this
// binary does not know (a newer binary's) are left alone.
func Up(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockKey); err != nil {
		return err
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, lockKey) //nolint:errcheck

	// The replaced migrations created schema_migrations without a checksum
	// column; nothing else ever did.
	var exists, hasChecksum bool
	if err := conn.QueryRow(ctx, `
		SELECT to_regclass('schema_migrations') IS NOT NULL,
		       EXISTS (SELECT 1 FROM pg_attribute
		                WHERE attrelid = to_regclass('schema_migrations') AND attname = 'checksum' AND NOT attisdropped)`,
	).Scan(&exists, &hasChecksum); err != nil {
		return err
	}
	if exists && !hasChecksum {
		var n int
		var last string
		if err := conn.QueryRow(ctx, `SELECT count(*), coalesce(max(name), '') FROM schema_migrations`).Scan(&n, &last); err != nil {
			return err
		}
		return fmt.Errorf("%w (%d recorded, the last %q): its schema predates 0001_baseline.sql and is not upgraded in place; "+
			"it holds development data only, so recreate the database (for the checkout's database: scripts/pg.sh clean, then scripts/pg.sh start) "+
			"and run escrowd migrate again", ErrPreBaseline, n, last)
	}
	if !exists {
		if _, err := conn.Exec(ctx, `CREATE TABLE schema_migrations (
			name       text        PRIMARY KEY,
			checksum   text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
	}

	applied := map[string]string{}
	rows, err := conn.Query(ctx, `SELECT name, checksum FROM schema_migrations`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var name, sum string
		if err := rows.Scan(&name, &sum); err != nil {
			rows.Close()
			return err
		}
		applied[name] = sum
	}
	if err := rows.Err(); err != nil {
		return err
	}

	names := Names()
	sums := make(map[string]string, len(names))
	for _, name := range names {
		sum, err := Checksum(name)
		if err != nil {
			return err
		}
		sums[name] = sum
		if got, ok := applied[name]; ok && got != sum {
			return fmt.Errorf("%w: %s was applied with checksum %s, but this binary's file has %s; "+
				"restore the applied file and put the change in a new migration", ErrChecksumMismatch, name, got, sum)
		}
	}

	for _, name := range names {
		if _, ok := applied[name]; ok {
			continue
		}
		sql, err := files.ReadFile(name)
		if err != nil {
			return err
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, string(sql)); err != nil {
			_ = tx.Rollback(ctx)
			return fmt.Errorf("migration %s: %w", name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (name, checksum) VALUES ($1, $2)`, name, sums[name]); err != nil {
			_ = tx.Rollback(ctx)
			return fmt.Errorf("migration %s: %w", name, err)
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("migration %s: %w", name, err)
		}
	}
	return nil
}
