// Package pgtest gives each test its own freshly migrated PostgreSQL
// database, cloned from a template that is migrated once per schema version.
// DATABASE_URL names the server (the Makefile starts a throwaway one).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/migrations"
)

// ServerURL is the server's URL; tests are skipped without one, except under
// CI where a missing database is a failure.
func ServerURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("DATABASE_URL")
	if u == "" {
		if os.Getenv("CI") != "" {
			tb.Fatal("DATABASE_URL is not set (run tests through `make test`)")
		}
		tb.Skip("DATABASE_URL is not set (run tests through `make test`)")
	}
	return u
}

func withDB(raw, db string) string {
	u, err := url.Parse(raw)
	if err != nil {
		panic(err)
	}
	u.Path = "/" + db
	return u.String()
}

// NewURL creates a fresh migrated database and returns its URL; it is
// dropped when the test ends.
func NewURL(tb testing.TB) string {
	tb.Helper()
	return newDB(tb, "t_", func(ctx context.Context, admin *pgx.Conn, server string) string {
		return ensureTemplate(tb, ctx, admin, server)
	})
}

// NewEmptyURL creates a fresh database with no schema at all (not cloned
// from the migrated template), for tests of migrating itself, and returns
// its URL; it is dropped when the test ends.
func NewEmptyURL(tb testing.TB) string {
	tb.Helper()
	return newDB(tb, "e_", func(context.Context, *pgx.Conn, string) string { return "template0" })
}

// newDB creates a database named prefix + random hex from the template
// template returns, dropped when the test ends.
func newDB(tb testing.TB, prefix string, template func(ctx context.Context, admin *pgx.Conn, server string) string) string {
	tb.Helper()
	server := ServerURL(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		tb.Fatalf("pgtest: connect: %v", err)
	}
	defer admin.Close(ctx)
	tmpl := template(ctx, admin, server)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := prefix + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, fmt.Sprintf(`CREATE DATABASE %s TEMPLATE %s`, name, tmpl)); err != nil {
		tb.Fatalf("pgtest: create database: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := pgx.Connect(ctx, server)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, fmt.Sprintf(`DROP DATABASE IF EXISTS %s WITH (FORCE)`, name))
	})
	return withDB(server, name)
}

// NewPool is NewURL plus a pool closed at the end of the test.
func NewPool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	return OpenPool(tb, NewURL(tb))
}

// OpenPool opens another pool on an existing test database (as a second
// process would), closed at the end of the test.
func OpenPool(tb testing.TB, url string) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = 40
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// ensureTemplate migrates the template of the current schema version once,
// serialised across test processes by an advisory lock.
func ensureTemplate(tb testing.TB, ctx context.Context, admin *pgx.Conn, server string) string {
	tb.Helper()
	tmpl := "tmpl_" + strings.ToLower(strings.NewReplacer("-", "_", ".", "_").Replace(migrations.Fingerprint()))
	if len(tmpl) > 60 {
		tmpl = tmpl[:60]
	}
	if _, err := admin.Exec(ctx, `SELECT pg_advisory_lock(7242002)`); err != nil {
		tb.Fatal(err)
	}
	defer admin.Exec(context.Background(), `SELECT pg_advisory_unlock(7242002)`) //nolint:errcheck
	var ready bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate)`, tmpl).Scan(&ready); err != nil {
		tb.Fatal(err)
	}
	if ready {
		return tmpl
	}
	_, _ = admin.Exec(ctx, fmt.Sprintf(`DROP DATABASE IF EXISTS %s WITH (FORCE)`, tmpl))
	if _, err := admin.Exec(ctx, fmt.Sprintf(`CREATE DATABASE %s`, tmpl)); err != nil {
		tb.Fatalf("pgtest: create template: %v", err)
	}
	pool, err := pgxpool.New(ctx, withDB(server, tmpl))
	if err != nil {
		tb.Fatal(err)
	}
	err = migrations.Up(ctx, pool)
	pool.Close()
	if err != nil {
		tb.Fatalf("pgtest: migrate template: %v", err)
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s WITH is_template true`, tmpl)); err != nil {
		tb.Fatal(err)
	}
	return tmpl
}

// OpenTransactionElsewhere opens a transaction that holds a transaction id in
// a fresh, empty database of the same server, as a forgotten session of some
// other application would, and keeps it open until end is called (or the
// test ends). Transaction ids are server-wide, so it holds back the
// server's xmin; the log's horizon must not wait for it (it cannot write
// to the log). It returns the database's name.
func OpenTransactionElsewhere(tb testing.TB) (database string, end func()) {
	tb.Helper()
	u := NewEmptyURL(tb)
	end = openSession(tb, u, "pgtest-forgotten-session", `SELECT pg_current_xact_id()`)
	return withoutQuery(u), end
}

// OpenTransactionHere opens, in the database of url, a transaction that
// holds a transaction id without writing to the log (a long read-model job
// or an idle session would), until end is called or the test ends.
func OpenTransactionHere(tb testing.TB, url string) (end func()) {
	tb.Helper()
	return openSession(tb, url, "pgtest-idle-writer", `SELECT pg_current_xact_id()`)
}

// OpenLogWriter opens, in the database of url, a transaction that appends
// one event to a stream of its own (through es_append, as the store does)
// and stays open until end is called (which rolls it back) or the test
// ends: it holds back the log's horizon. It returns the stream's name.
func OpenLogWriter(tb testing.TB, url string) (stream string, end func()) {
	tb.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	stream = "pgtest-open-writer-" + hex.EncodeToString(b[:])
	end = openSession(tb, url, "pgtest-open-log-writer", fmt.Sprintf(
		`SELECT tx FROM es_append(ARRAY['%s'], ARRAY[-1]::bigint[], ARRAY[1], ARRAY[gen_random_uuid()],
		   ARRAY['pgtest.held'], ARRAY['{}']::json[], ARRAY[NULL]::json[], ARRAY[1], ARRAY[0])`, stream))
	return stream, end
}

// OpenAnnouncedWriter opens, in the database of url, a transaction that
// has announced itself as a log writer (es_writer_begin, as an append does
// first) and has not written anything yet, so it has no transaction id,
// until end is called or the test ends.
func OpenAnnouncedWriter(tb testing.TB, url string) (end func()) {
	tb.Helper()
	return openSession(tb, url, "pgtest-announced-writer", `SELECT es_writer_begin()`)
}

// withoutQuery is the database name of url.
func withoutQuery(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(u.Path, "/")
}

// openSession connects to url as application name, begins a transaction,
// runs stmt in it and keeps it open until the returned end is called (or
// the test ends).
func openSession(tb testing.TB, url, name, stmt string) (end func()) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatalf("pgtest: connect: %v", err)
	}
	var pid uint32
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		tb.Fatal(err)
	}
	var once bool
	end = func() {
		if once {
			return
		}
		once = true
		_ = conn.Close(context.Background()) // rolls the transaction back
		// Closing only asks the server to end the session; its backend
		// lingers in pg_stat_activity (still holding its transaction id)
		// for a moment. Return once it is gone, so a caller can rely on
		// the transaction having ended.
		waitForBackendGone(tb, pid)
	}
	tb.Cleanup(end) // before the database is dropped
	if _, err := conn.Exec(ctx, `SET application_name = '`+name+`'`); err != nil {
		tb.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `BEGIN`); err != nil {
		tb.Fatal(err)
	}
	if _, err := conn.Exec(ctx, stmt); err != nil {
		tb.Fatal(err)
	}
	return end
}

func waitForBackendGone(tb testing.TB, pid uint32) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, ServerURL(tb))
	if err != nil {
		tb.Errorf("pgtest: connect: %v", err)
		return
	}
	defer admin.Close(context.Background())
	for {
		var alive bool
		err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&alive)
		if err != nil {
			tb.Errorf("pgtest: waiting for session %d to end: %v", pid, err)
			return
		}
		if !alive {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
