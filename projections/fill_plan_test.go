package projections

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/eventstore"
)

// A fill looks up by id the rows it has written before (records met
// again) in a shadow table that grows from empty and is not analyzed
// until the swap: each lookup must seek the table as it is, not follow a
// plan a pooled connection cached while it was empty (a sequential scan
// per page made a rebuild of 1,000,000 events take a minute instead of
// 25 s). Counted with the table's own statistics, which move with it
// into the live schema.
func TestFillLookupsSeekAsTheShadowGrows(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	meta, err := json.Marshal(domain.Meta{MerchantID: "m1", Environment: domain.Test, Actor: "t"})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1700000000, 0).UTC()
	for i := range 400 {
		var recs []ledger.Record
		for j := range 50 {
			id := fmt.Sprintf("rec-%03d-%02d", i, j)
			recs = append(recs, ledger.Record{ID: id, Reference: id, Amount: money.Naira(10), Currency: "NGN", Status: ledger.Success,
				Type: ledger.Deposit, MerchantID: "m1", Environment: domain.Test, CreatedAt: at, UpdatedAt: at})
		}
		data, err := json.Marshal(payment.Settled{Records: recs})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.Append(ctx, eventstore.StreamAppend{Stream: fmt.Sprintf("payment-%d", i), Expected: eventstore.NoStream,
			Events: []eventstore.EventData{{ID: uuid.New(), Type: payment.Settled{}.EventType(), Data: data, Metadata: meta}}}); err != nil {
			t.Fatal(err)
		}
	}
	defer func(page, hold int) { rebuildPage, fillHold = page, hold }(rebuildPage, fillHold)
	rebuildPage, fillHold = 1, 0
	if err := RebuildAll(ctx, e.pool, e.store, []Projector{Ledger{}}, e.log, nil); err != nil {
		t.Fatal(err)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM rm_transactions`); n != 20000 {
		t.Fatalf("%d records rebuilt, want 20,000", n)
	}
	// The rebuild's connections report their statistics as they close.
	e.pool.Reset()
	var scans int64
	for range 50 {
		scans = count(t, e.pool, `SELECT coalesce(seq_scan, 0) FROM pg_stat_all_tables WHERE relid = 'rm_transactions'::regclass`)
		if scans > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	// While the table is a few pages, a scan is the cheaper plan (65
	// scans here); a plan cached then scans it for every page (304).
	if scans == 0 || scans > 100 {
		t.Fatalf("%d sequential scans of rm_transactions in a rebuild of 400 pages, want fewer than 100", scans)
	}
}

// A rebuild swaps in tables that have their statistics: the listings'
// first queries are planned for the rows there are, not for an empty
// table, without waiting for autovacuum.
func TestRebuiltTablesAreAnalyzed(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	svc, a := e.service(t)
	mixedWorkload(t, svc, a, "s", 1)
	if err := RebuildAll(ctx, e.pool, e.store, All(nil), e.log, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range All(nil) {
		for _, table := range p.Tables() {
			if n := count(t, e.pool, `SELECT count(*) FROM pg_stats WHERE schemaname = current_schema() AND tablename = $1`, table); n == 0 {
				if rows := count(t, e.pool, `SELECT count(*) FROM `+table); rows > 0 {
					t.Errorf("%s.%s: %d rows and no statistics after the rebuild", p.Name(), table, rows)
				}
			}
		}
	}
}
