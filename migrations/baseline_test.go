package migrations_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/internal/pgtest"
)

// droppedShims are the one allowed difference between the baseline and
// the replaced migrations: what those kept only so that binaries older
// than one of them went on working during a rolling upgrade. No current
// code uses them. Each statement removes one from the history's schema
// before the comparison; DROP FUNCTION without IF EXISTS fails if the
// shim is not there, so the list cannot go stale silently.
var droppedShims = []struct{ why, sql string }{
	{
		why: "0008: es_append with jsonb[] data and metadata, for binaries older than 0007 (the adapter casts to json[])",
		sql: `DROP FUNCTION es_append(text[], bigint[], int[], uuid[], text[], jsonb[], jsonb[], int[], int[], boolean)`,
	},
	{
		why: "0015: expires_at's default, for servers older than 0015 that inserted without it (httpapi always sets it)",
		sql: `ALTER TABLE http_idempotency_keys ALTER COLUMN expires_at DROP DEFAULT`,
	},
}

// TestBaselineEqualsHistory: the baseline creates the same schema as the
// 15 migrations it replaced (testdata/history), shims aside, as pg_dump
// --schema-only prints it: tables and columns in order, types, defaults,
// constraints, indexes, and every function's signature and body.
func TestBaselineEqualsHistory(t *testing.T) {
	pgDump := findPgDump(t)
	history := pgtest.NewEmptyURL(t)
	migrateHistory(t, history)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, history)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range droppedShims {
		if _, err := conn.Exec(ctx, s.sql); err != nil {
			t.Fatalf("dropping the shim (%s): %v", s.why, err)
		}
	}
	conn.Close(ctx)

	baseline := pgtest.NewEmptyURL(t)
	if err := up(t, baseline); err != nil {
		t.Fatal(err)
	}

	want, got := schemaDump(t, pgDump, history), schemaDump(t, pgDump, baseline)
	if want != got {
		t.Fatalf("the baseline's schema differs from the replaced migrations' (- history, + baseline):\n%s", lineDiff(want, got))
	}
	if !strings.Contains(got, "CREATE FUNCTION public.es_append(") || !strings.Contains(got, "CREATE TABLE public.webhook_deliveries") {
		t.Fatalf("the dump lacks the schema:\n%s", got)
	}
}

// findPgDump finds pg_dump as scripts/pg.sh finds the PostgreSQL binaries:
// $PG_BIN, else the newest /usr/lib/postgresql/*/bin, else $PATH.
func findPgDump(t *testing.T) string {
	t.Helper()
	pgtest.ServerURL(t) // skips (or fails under CI) without a server
	if b := os.Getenv("PG_BIN"); b != "" {
		return filepath.Join(b, "pg_dump")
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(dir string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
		return v
	}
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_dump")); err == nil {
			return filepath.Join(d, "pg_dump")
		}
	}
	if p, err := exec.LookPath("pg_dump"); err == nil {
		return p
	}
	t.Fatal("pg_dump not found (set PG_BIN, or apt-get install postgresql-client)")
	return ""
}

// schemaDump is pg_dump --schema-only of the database at url, without
// schema_migrations (its columns and rows differ by design) and without
// the lines that differ between any two dumps: the version header and the
// random key of \restrict.
func schemaDump(t *testing.T, pgDump, url string) string {
	t.Helper()
	cmd := exec.Command(pgDump, "--schema-only", "--exclude-table=public.schema_migrations", "--dbname="+url)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pg_dump: %v: %s", err, stderr.String())
	}
	var keep []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, `\restrict `) || strings.HasPrefix(line, `\unrestrict `) ||
			strings.HasPrefix(line, "-- Dumped from database version") || strings.HasPrefix(line, "-- Dumped by pg_dump version") {
			continue
		}
		keep = append(keep, line)
	}
	return strings.Join(keep, "\n")
}

// lineDiff lists the lines only in a (-) and only in b (+), each with its
// line number, in order: enough to see a missing index or a changed body.
func lineDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	// Longest common subsequence, then walk it.
	lcs := make([][]int, len(al)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(bl)+1)
	}
	for i := len(al) - 1; i >= 0; i-- {
		for j := len(bl) - 1; j >= 0; j-- {
			if al[i] == bl[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out strings.Builder
	i, j := 0, 0
	for i < len(al) || j < len(bl) {
		switch {
		case i < len(al) && j < len(bl) && al[i] == bl[j]:
			i, j = i+1, j+1
		case j < len(bl) && (i == len(al) || lcs[i][j+1] >= lcs[i+1][j]):
			fmt.Fprintf(&out, "+%d: %s\n", j+1, bl[j])
			j++
		default:
			fmt.Fprintf(&out, "-%d: %s\n", i+1, al[i])
			i++
		}
	}
	return out.String()
}
