package projections

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// The live projectors' statements are prepared once per connection and
// their plan kept: each must find the rows it reads or writes by their
// keys even under a plan made while its table was new and never analyzed
// (byIDs), and so must the listings' counts they move (countsSQL).
// Without the lookups, such a plan joins to the whole table with a
// sequential scan, read again every batch as the table grows.
func TestProjectorLookupsSeekOnNewTables(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	for _, p := range []Projector{NewEscrows(), Ledger{}, Customers{}, AuditTrail{}} {
		if _, err := prepare(ctx, e.pool, p); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// The plan kept for a prepared statement is, at worst, the generic one.
	if _, err := conn.Exec(ctx, `SET plan_cache_mode TO force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `RESET plan_cache_mode; DEALLOCATE ALL`) //nolint:errcheck
	for i, c := range []struct {
		name, sql string
		tables    []string
	}{
		{"escrow upsert", escrowChangeSQL, []string{"rm_escrows", "rm_escrow_counts"}},
		{"escrow states", escrowStatesSQL, []string{"rm_escrows"}},
		{"transaction upsert", transactionChangeSQL, []string{"rm_transactions", "rm_transaction_counts"}},
		{"customer creations", customerCreateSQL, []string{"rm_customers", "rm_customer_counts"}},
		{"audit trail counts", auditCountsSQL, []string{"rm_event_counts"}},
	} {
		stmt := fmt.Sprint("lookup_plan_", i)
		sd, err := conn.Conn().Prepare(ctx, stmt, c.sql)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		args := strings.TrimSuffix(strings.Repeat("NULL, ", len(sd.ParamOIDs)), ", ")
		rows, err := conn.Query(ctx, `EXPLAIN EXECUTE `+stmt+`(`+args+`)`)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		text := strings.Join(plan, "\n")
		for _, table := range c.tables {
			if strings.Contains(text, "Seq Scan on "+table+" ") {
				t.Errorf("%s scans %s:\n%s", c.name, table, text)
			}
		}
	}
}

// byIDs gives each row once, however often the ids name it, as
// id = ANY (ids) does: a projector's prior rows counted twice would move
// the counts twice.
func TestByIDsGivesEachRowOnce(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `CREATE TEMP TABLE byids_t (id text PRIMARY KEY, v int);
		INSERT INTO byids_t VALUES ('a', 1), ('b', 2), ('c', 3)`); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `DROP TABLE byids_t`) //nolint:errcheck
	rows, err := conn.Query(ctx, byIDs("byids_t", "id", "id, v", `$1`)+` ORDER BY id`, []string{"b", "a", "b", "zz", "a"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var id string
		var v int
		if err := rows.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprint(id, v))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[a1 b2]" {
		t.Fatalf("byIDs gave %v, want [a1 b2]", got)
	}
}
