package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// TestReadTenantUsesTheIndex: the adapter's tenant query reads
// es_events_tenant_idx with the tenant and the position as its bounds, not
// the log filtering other tenants' events out, on a log whose tenant is
// 1% of it.
func TestReadTenantUsesTheIndex(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	// 100 tenants' events in 200 transactions, as appends write them, then
	// ANALYZE so the planner knows the table.
	for range 200 {
		if _, err := pool.Exec(ctx, `INSERT INTO es_events (event_id, stream_id, revision, event_type, data, metadata)
			SELECT gen_random_uuid(), 'bulk-' || gen_random_uuid(), 0, 'escrow.created', '{}',
			       json_build_object('merchantId', 'm' || g, 'environment', 'test')
			FROM generate_series(0, 99) g`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `ANALYZE es_events`); err != nil {
		t.Fatal(err)
	}
	for _, f := range []eventstore.TenantFilter{
		{MerchantID: "m7", Environment: "test"},
		{MerchantID: "m7", Environment: "test", Type: "escrow."},
	} {
		where, args := tenantWhere(f, "18446744073709551615")
		query, args := tenantQuery(where, args, eventstore.Position{Commit: 1, Prepare: 1}, 0, 100)
		rows, err := pool.Query(ctx, `EXPLAIN `+query, args...)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for rows.Next() {
			var l string
			_ = rows.Scan(&l)
			lines = append(lines, l)
		}
		rows.Close()
		text := strings.Join(lines, "\n")
		// The tenant is an index condition (never a filter applied to
		// rows read from the log), and so is the position.
		cond := text[strings.Index(text, "es_events_tenant_idx"):]
		if !strings.Contains(text, "es_events_tenant_idx") || strings.Contains(text, "Seq Scan") ||
			!strings.Contains(cond, "Index Cond: (((metadata ->> 'merchantId'::text) = 'm7'::text) AND ((metadata ->> 'environment'::text) = 'test'::text)") ||
			!strings.Contains(cond, "ROW(tx_id, seq) > ROW(") {
			t.Fatalf("%+v: the plan does not range-scan the tenant index:\n%s", f, text)
		}
	}
}
