package projections

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/view"
)

// planRows sums what the scans of an EXPLAIN (ANALYZE, FORMAT JSON) plan
// read: the rows they returned and those their filters (or the recheck of
// a lossy bitmap) removed, over their loops.
func planRows(node map[string]any) float64 {
	var n float64
	if t, _ := node["Node Type"].(string); len(t) >= 4 && t[len(t)-4:] == "Scan" {
		loops, _ := node["Actual Loops"].(float64)
		rows, _ := node["Actual Rows"].(float64)
		removed, _ := node["Rows Removed by Filter"].(float64)
		rechecked, _ := node["Rows Removed by Index Recheck"].(float64)
		n += (rows + removed + rechecked) * max(loops, 1)
	}
	for _, c := range asNodes(node["Plans"]) {
		n += planRows(c)
	}
	return n
}

func asNodes(v any) []map[string]any {
	list, _ := v.([]any)
	out := make([]map[string]any, 0, len(list))
	for _, x := range list {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// Every listing's first, middle and last page reads a bounded number of
// rows (the plan's scans, measured with EXPLAIN ANALYZE over 60,000
// escrows and records of one merchant), and each page holds the rows an
// OFFSET over the listing's whole order gives. The rows are written
// without positions and numbered and counted by the projectors' DDL, as
// an existing deployment's are on upgrade.
func TestListingPagesSeekOverIndexes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	listedSchemas(t, e)
	const n = 60_000
	if _, err := e.pool.Exec(ctx, `
		INSERT INTO rm_escrows (id, payment_token, merchant_id, environment, seller_id, buyer_id, status, category_id, deleted,
			state, created_at, disputed_at)
		SELECT 'e' || i, 'pt' || i, 'm1', 'test', CASE WHEN i % 3 = 0 THEN '' ELSE 's' || (i % 50) END,
			CASE WHEN i % 2 = 0 THEN 'busy' ELSE 'b' || (i % 200) END,
			(ARRAY['PENDING', 'ONGOING', 'COMPLETED', 'DISPUTED'])[i % 4 + 1], 'c' || (i % 5), i % 97 = 0,
			'{}', now() - (100000 - i) * interval '1 second', CASE WHEN i % 4 = 3 THEN now() - (100000 - i) * interval '1 second' END
		FROM generate_series(1, $1) i`, n); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `
		INSERT INTO rm_transactions (id, merchant_id, environment, customer_id, reference, transaction_type, status, record, created_at)
		SELECT 't' || i, 'm1', 'test', CASE WHEN i % 2 = 0 THEN NULL ELSE 'b' || (i % 200) END, 'r' || i,
			(ARRAY['escrow', 'topup', 'withdrawal'])[i % 3 + 1], 'success', '{}', now()
		FROM generate_series(1, $1) i`, n); err != nil {
		t.Fatal(err)
	}
	listedSchemas(t, e) // numbers and counts the rows
	if _, err := e.pool.Exec(ctx, `ANALYZE rm_escrows; ANALYZE rm_transactions; ANALYZE rm_escrow_counts; ANALYZE rm_transaction_counts`); err != nil {
		t.Fatal(err)
	}
	q := NewQueries(e.pool, nil)
	str := func(s string) *string { return &s }
	m, env := "m1", domain.Environment("test")
	cases := map[string]listing{
		"feeds":                    escrowsListing(EscrowFilter{MerchantID: m, Environment: env}),
		"feeds by status":          escrowsListing(EscrowFilter{MerchantID: m, Environment: env, Status: "ONGOING"}),
		"feeds by category":        escrowsListing(EscrowFilter{MerchantID: m, Environment: env, CategoryID: "c2"}),
		"feeds by both":            escrowsListing(EscrowFilter{MerchantID: m, Environment: env, Status: "DISPUTED", CategoryID: "c3"}),
		"feeds by party":           escrowsListing(EscrowFilter{MerchantID: m, Environment: env, PartyID: "s7"}),
		"feeds by party, status":   escrowsListing(EscrowFilter{MerchantID: m, Environment: env, PartyID: "b7", Status: "ONGOING"}),
		"merchant sales":           escrowsListing(EscrowFilter{MerchantID: m, Environment: env, SellerID: str("")}),
		"sales by status":          escrowsListing(EscrowFilter{MerchantID: m, Environment: env, SellerID: str(""), Status: "PENDING"}),
		"purchases":                escrowsListing(EscrowFilter{MerchantID: m, Environment: env, BuyerID: str("b11")}),
		"disputes":                 disputesListing(DisputeFilter{MerchantID: m, Environment: env}),
		"disputes by status":       disputesListing(DisputeFilter{MerchantID: m, Environment: env, Status: "DISPUTED"}),
		"disputes by party":        disputesListing(DisputeFilter{MerchantID: m, Environment: env, PartyID: "b3"}),
		"disputes of a busy buyer": disputesListing(DisputeFilter{MerchantID: m, Environment: env, PartyID: "busy"}),
		"busy buyer's purchases":   escrowsListing(EscrowFilter{MerchantID: m, Environment: env, BuyerID: str("busy")}),
		"merchant transactions":    transactionsListing(TransactionFilter{MerchantID: m, Environment: env}),
		"merchant by type":         transactionsListing(TransactionFilter{MerchantID: m, Environment: env, Types: []string{"topup"}}),
		"merchant by types":        transactionsListing(TransactionFilter{MerchantID: m, Environment: env, Types: []string{"topup", "escrow"}}),
		"payment history":          transactionsListing(TransactionFilter{MerchantID: m, Environment: env, CustomerID: "b3"}),
		"payment history by type":  transactionsListing(TransactionFilter{MerchantID: m, Environment: env, CustomerID: "b3", Types: []string{"escrow"}}),
	}
	for name, l := range cases {
		if l.keys == nil {
			t.Fatalf("%s: no kept key", name)
		}
		// The reference: the listing's whole order.
		args := append([]any{l.merchant, string(l.environment)}, l.args...)
		rows, err := e.pool.Query(ctx, `SELECT `+l.kept.id+` FROM `+l.kept.table+` WHERE merchant_id = $1 AND environment = $2
			AND ((`+joinOr(l.branches)+`)) ORDER BY `+l.pos+` DESC`, args...)
		if err != nil {
			t.Fatal(err)
		}
		var all []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			all = append(all, id)
		}
		rows.Close()
		const limit = 10
		pages := (len(all) + limit - 1) / limit
		for _, page := range []int{1, 2, pages / 2, pages - 1, pages} {
			if page < 1 {
				continue
			}
			sk, err := q.seek(ctx, l, view.Page{Page: page, Limit: limit})
			if err != nil {
				t.Fatal(err)
			}
			if sk.count != int64(len(all)) {
				t.Fatalf("%s: count %d, rows %d", name, sk.count, len(all))
			}
			sql, args := l.rowsSQL(sk.upper, sk.skip, limit)
			var got []string
			rows, err := e.pool.Query(ctx, sql, args...)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				vals, err := rows.Values()
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, vals[len(vals)-2].(string))
			}
			rows.Close()
			want := all[min((page-1)*limit, len(all)):min(page*limit+1, len(all))]
			if !slices.Equal(got, want) {
				t.Fatalf("%s page %d of %d: %v, want %v", name, page, pages, got, want)
			}
			var plan []map[string]any
			var doc []byte
			if err := e.pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+sql, args...).Scan(&doc); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(doc, &plan); err != nil {
				t.Fatal(err)
			}
			root := plan[0]["Plan"].(map[string]any)
			if read := planRows(root); read > 8*(1<<bucketShift) {
				t.Errorf("%s page %d of %d (%d rows): the scans read %.0f rows:\n%s", name, page, pages, len(all), read, doc)
			}
		}
	}
}

// listedSchemas runs the DDL of the escrows' and the ledger's read models:
// their tables and indexes, and the numbering and counting of rows written
// without positions.
func listedSchemas(t *testing.T, e *env) {
	t.Helper()
	for _, p := range []Projector{NewEscrows(), Ledger{}} {
		if _, err := e.pool.Exec(context.Background(), p.Schema()); err != nil {
			t.Fatal(err)
		}
	}
}

// planIndexes lists the indexes an EXPLAIN (FORMAT JSON) plan reads.
func planIndexes(node map[string]any) []string {
	var names []string
	if name, ok := node["Index Name"].(string); ok {
		names = append(names, name)
	}
	for _, c := range asNodes(node["Plans"]) {
		names = append(names, planIndexes(c)...)
	}
	return names
}

// A date range (from, to) is no kept key, so its listing counts its rows
// (up to BoundedCount): over 60,000 escrows and records of one merchant
// written in time order, a range of a few minutes in the middle of the
// history is counted through the block range index on created_at,
// reading a range or two of blocks, not the merchant's whole history.
func TestDateRangesReadTheirBlockRanges(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	listedSchemas(t, e)
	const n = 60_000
	for _, sql := range []string{`
		INSERT INTO rm_escrows (id, payment_token, merchant_id, environment, seller_id, buyer_id, status, category_id, deleted,
			state, created_at, pos)
		SELECT 'e' || i, 'pt' || i, 'm1', 'test', 's' || (i % 50), 'b' || (i % 200), 'ONGOING', '', false,
			'{}', timestamptz '2026-01-01' + i * interval '1 second', i
		FROM generate_series(1, $1::int) i`, `
		INSERT INTO rm_transactions (id, merchant_id, environment, customer_id, reference, transaction_type, status, record, created_at, pos)
		SELECT 't' || i, 'm1', 'test', CASE WHEN i % 2 = 0 THEN NULL ELSE 'b' || (i % 200) END, 'r' || i,
			'escrow', 'success', '{}', timestamptz '2026-01-01' + i * interval '1 second', i
		FROM generate_series(1, $1::int) i`,
	} {
		if _, err := e.pool.Exec(ctx, sql, n); err != nil {
			t.Fatal(err)
		}
	}
	// Autovacuum summarizes the block ranges as they fill (autosummarize);
	// a range not yet summarized is read whole.
	for _, table := range []string{"rm_escrows", "rm_transactions"} {
		if _, err := e.pool.Exec(ctx, `VACUUM ANALYZE `+table); err != nil {
			t.Fatal(err)
		}
	}
	from, to := time.Date(2026, 1, 1, 8, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 8, 5, 0, 0, time.UTC) // 300 rows
	m, env := "m1", domain.Environment("test")
	cases := map[string]struct {
		l     listing
		index string
		want  int64
	}{
		"feeds":                 {escrowsListing(EscrowFilter{MerchantID: m, Environment: env, From: &from, To: &to}), "rm_escrows_created", 300},
		"merchant transactions": {transactionsListing(TransactionFilter{MerchantID: m, Environment: env, From: &from, To: &to}), "rm_transactions_created", 150},
	}
	check := func(when string) {
		t.Helper()
		for name, c := range cases {
			if c.l.keys != nil {
				t.Fatalf("%s: a date range is counted by a kept key", name)
			}
			sql, args := c.l.boundedCountSQL()
			var count int64
			if err := e.pool.QueryRow(ctx, sql, args...).Scan(&count); err != nil {
				t.Fatal(err)
			}
			if count != c.want {
				t.Fatalf("%s, %s: %d rows in the range, want %d", name, when, count, c.want)
			}
			var doc []byte
			if err := e.pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+sql, args...).Scan(&doc); err != nil {
				t.Fatal(err)
			}
			var plan []map[string]any
			if err := json.Unmarshal(doc, &plan); err != nil {
				t.Fatal(err)
			}
			root := plan[0]["Plan"].(map[string]any)
			if !slices.Contains(planIndexes(root), c.index) {
				t.Errorf("%s, %s: the count does not read %s:\n%s", name, when, c.index, doc)
			}
			if read := planRows(root); read > n/10 {
				t.Errorf("%s, %s: the count read %.0f of %d rows:\n%s", name, when, read, n, doc)
			}
		}
	}
	check("as written")
	// A history in service is not only appended to: a tenth of the rows
	// change late (an escrow confirmed or disputed long after it was
	// made), vacuum frees their old versions' space all over the table,
	// and new rows fill it. Each block range then holds dates far apart;
	// the index keeps them as separate intervals (minmax_multi), so a
	// range of old dates still skips the ranges the new rows went to.
	for _, sql := range []string{
		`UPDATE rm_escrows SET status = 'COMPLETED' WHERE pos % 10 = 0`,
		`UPDATE rm_transactions SET status = 'failed' WHERE pos % 10 = 0`,
		`VACUUM rm_escrows`, `VACUUM rm_transactions`,
		`INSERT INTO rm_escrows (id, payment_token, merchant_id, environment, seller_id, buyer_id, status, category_id, deleted,
			state, created_at, pos)
		SELECT 'e' || i, 'pt' || i, 'm1', 'test', 's' || (i % 50), 'b' || (i % 200), 'ONGOING', '', false,
			'{}', timestamptz '2026-03-01' + i * interval '1 second', i
		FROM generate_series(` + strconv.Itoa(n+1) + `, ` + strconv.Itoa(n+n/10) + `) i`,
		`INSERT INTO rm_transactions (id, merchant_id, environment, customer_id, reference, transaction_type, status, record, created_at, pos)
		SELECT 't' || i, 'm1', 'test', CASE WHEN i % 2 = 0 THEN NULL ELSE 'b' || (i % 200) END, 'r' || i,
			'escrow', 'success', '{}', timestamptz '2026-03-01' + i * interval '1 second', i
		FROM generate_series(` + strconv.Itoa(n+1) + `, ` + strconv.Itoa(n+n/10) + `) i`,
		`VACUUM ANALYZE rm_escrows`, `VACUUM ANALYZE rm_transactions`,
	} {
		if _, err := e.pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	check("after late changes and new rows in the space they freed")
}
