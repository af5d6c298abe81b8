package audit

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// pooledConn is a connection of a fresh test database's pool, as the
// audit takes one, released when the test ends.
func pooledConn(t *testing.T) *pgxpool.Conn {
	t.Helper()
	conn, err := pgtest.NewPool(t).Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	return conn
}

// The records table grows from empty to every record of the merchant, on a
// pooled connection that earlier audits used: its lookups by id must seek
// the table as it is, not follow a plan cached while it was empty (a
// sequential scan per page makes the replay quadratic; a second audit in
// one process took four times the first). Counted with the table's own
// statistics: the lookups of a page over a large table scan nothing.
func TestRecordLookupsSeekAsTheTableGrows(t *testing.T) {
	ctx := context.Background()
	conn := pooledConn(t)
	page := func(from, n int) []recordWrite {
		ws := make([]recordWrite, n)
		for i := range ws {
			id := fmt.Sprintf("rec-%07d", from+i)
			ws[i] = recordWrite{pos: eventstore.Position{Commit: uint64(from + i + 1), Prepare: uint64(from + i + 1)},
				rec: ledger.Record{ID: id, Reference: id, Amount: money.Naira(10), Currency: "NGN", Status: ledger.Pending,
					Type: ledger.Commission, Environment: domain.Test, CreatedAt: time.Unix(0, 0).UTC()},
				canon: []byte(`{"id":"` + id + `"}`)}
		}
		return ws
	}
	fold := func(rs *records, ws []recordWrite) {
		t.Helper()
		if err := rs.fold(ctx, ws, func(d Difference) { t.Fatalf("difference %v", d) }); err != nil {
			t.Fatal(err)
		}
	}
	// An earlier audit on the connection, over a small history.
	rs, err := newRecords(ctx, conn.Conn())
	if err != nil {
		t.Fatal(err)
	}
	for from := 0; from < 10000; from += 1000 {
		fold(rs, page(from, 1000))
	}
	if err := rs.drop(ctx); err != nil {
		t.Fatal(err)
	}

	rs, err = newRecords(ctx, conn.Conn())
	if err != nil {
		t.Fatal(err)
	}
	defer rs.drop(ctx) //nolint:errcheck
	for from := 0; from < 50000; from += 2000 {
		fold(rs, page(from, 2000))
	}
	seqScans := func() int64 {
		t.Helper()
		if _, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := conn.QueryRow(ctx, `SELECT seq_scan FROM pg_stat_all_tables WHERE relid = 'pg_temp.audit_records'::regclass`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := seqScans()
	for from := 5000; from < 5300; from += 100 {
		fold(rs, page(from, 100)) // records seen before: looked up, then updated
	}
	if after := seqScans(); after != before {
		t.Fatalf("%d sequential scans of the records table for three pages of 100 lookups over 50,000 records", after-before)
	}
}

// The comparison reads the records in id order from the table's primary
// key: no sort of every record of the merchant at the end of the replay.
func TestRecordsAreComparedInIndexOrder(t *testing.T) {
	ctx := context.Background()
	conn := pooledConn(t)
	rs, err := newRecords(ctx, conn.Conn())
	if err != nil {
		t.Fatal(err)
	}
	defer rs.drop(ctx) //nolint:errcheck
	if _, err := conn.Exec(ctx, `INSERT INTO audit_records (id, ord, environment, canon, changed, digest)
		SELECT 'rec-' || i, i, 'test', '{}', false, sha256(int4send(i)) FROM generate_series(1, 20000) i;
		ANALYZE audit_records`); err != nil {
		t.Fatal(err)
	}
	var plan string
	if err := conn.QueryRow(ctx, `EXPLAIN (FORMAT TEXT) `+recordDigestsSQL).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, "Index Scan using audit_records_pkey") {
		t.Fatalf("the records are not read in the primary key's order:\n%s", plan)
	}
}

// The records' session plans every statement for the table as it is and
// without JIT (newRecords); the pooled connection gets its settings back.
func TestRecordsSessionSettings(t *testing.T) {
	ctx := context.Background()
	conn := pooledConn(t)
	show := func() string {
		t.Helper()
		var mode, jit string
		if err := conn.QueryRow(ctx, `SELECT current_setting('plan_cache_mode'), current_setting('jit')`).Scan(&mode, &jit); err != nil {
			t.Fatal(err)
		}
		return mode + " " + jit
	}
	was := show()
	rs, err := newRecords(ctx, conn.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if got := show(); got != "force_custom_plan off" {
		t.Fatalf("records session: plan_cache_mode and jit %s", got)
	}
	if err := rs.drop(ctx); err != nil {
		t.Fatal(err)
	}
	if got := show(); got != was {
		t.Fatalf("after the audit: %s, before it %s", got, was)
	}
}
