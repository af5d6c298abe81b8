package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/escrowd/escrowd/eventstore"
)

// The audit trail (GET /v1/events) on a large log: 1,000,000 events of 100
// merchants (10,000 each, interleaved as their traffic would be), written
// directly through the event store; then pages of 100 events of one of
// them, read through the real server. docs/performance.md records the
// percentiles.
const (
	auditMerchants = 100
	auditPerTenant = 10_000
	auditPerAppend = 1_000 // events per append: 10 per merchant
	auditPage      = 100
)

// fillAuditLog appends auditMerchants x auditPerTenant events; merchant 0
// is first (the benchmark's own merchant, whose keys the server knows).
// It returns the positions of merchant 0's events in order.
func fillAuditLog(b *testing.B, store eventstore.Store, first string) []eventstore.Position {
	b.Helper()
	ids := []string{first}
	for i := 1; i < auditMerchants; i++ {
		ids = append(ids, uuid.NewString())
	}
	metas := make([][]byte, len(ids))
	for i, id := range ids {
		metas[i] = fmt.Appendf(nil, `{"merchantId":%q,"environment":"test","actor":"bench","occurredAt":"2026-11-27T12:00:00Z"}`, id)
	}
	perMerchant := auditPerAppend / auditMerchants
	appends := auditMerchants * auditPerTenant / auditPerAppend
	var (
		mu   sync.Mutex
		mine []eventstore.Position
	)
	g, ctx := errgroup.WithContext(context.Background())
	g.SetLimit(4)
	for a := range appends {
		g.Go(func() error {
			streams := make([]eventstore.StreamAppend, len(ids))
			for m := range ids {
				evs := make([]eventstore.EventData, perMerchant)
				for k := range evs {
					evs[k] = eventstore.EventData{ID: uuid.New(), Type: "payment.settled", Metadata: metas[m],
						Data: fmt.Appendf(nil, `{"transactionId":"%d-%d-%d","amount":"125.50","currency":"NGN","status":"success"}`, a, m, k)}
				}
				streams[m] = eventstore.StreamAppend{Stream: fmt.Sprintf("bench-%d-%d", m, a), Expected: eventstore.NoStream, Events: evs}
			}
			if _, err := store.Append(ctx, streams...); err != nil {
				return err
			}
			got, err := store.ReadStream(ctx, streams[0].Stream, 0, 0)
			if err != nil {
				return err
			}
			mu.Lock()
			for _, e := range got {
				mine = append(mine, e.Position)
			}
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	slices.SortFunc(mine, func(x, y eventstore.Position) int {
		if x.Less(y) {
			return -1
		}
		if y.Less(x) {
			return 1
		}
		return 0
	})
	return mine
}

// BenchmarkAuditTrailPage reads pages of 100 of one merchant's events among
// 1,000,000 of 100 merchants through GET /v1/events: after (incremental
// sync from a random one of its events), page (a random page number, with
// the count), and the store's ReadTenant alone. One client; p50 and p99
// of each are reported.
func BenchmarkAuditTrailPage(b *testing.B) {
	bs := newBenchServer(b)
	defer bs.close()
	t0 := time.Now()
	mine := fillAuditLog(b, bs.store, bs.merchantID)
	if len(mine) != auditPerTenant {
		b.Fatalf("merchant 0 has %d events", len(mine))
	}
	b.Logf("filled %d events in %s", auditMerchants*auditPerTenant, time.Since(t0).Round(time.Second))
	if _, err := bs.pool.Exec(bs.ctx, `ANALYZE es_events`); err != nil {
		b.Fatal(err)
	}
	// The first read waits for the projections to pass the fill.
	t0 = time.Now()
	for {
		if _, _, err := bs.client.do("GET", "/v1/events?limit=1", bs.sa, "", ""); err == nil {
			break
		}
		if time.Since(t0) > 15*time.Minute {
			b.Fatal("the read models did not catch up with the fill")
		}
		time.Sleep(time.Second)
	}
	b.Logf("read models caught up in %s", time.Since(t0).Round(time.Second))

	check := func(data []byte, after *eventstore.Position) error {
		var d struct {
			Data []struct {
				Position string `json:"position"`
			} `json:"data"`
		}
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		if len(d.Data) == 0 || len(d.Data) > auditPage {
			return fmt.Errorf("%d events in a page", len(d.Data))
		}
		if after != nil {
			p, err := eventstore.ParsePosition(d.Data[0].Position)
			if err != nil || !after.Less(p) {
				return fmt.Errorf("first event %s is not after %s", d.Data[0].Position, after)
			}
		}
		return nil
	}
	run := func(b *testing.B, op func(r *rand.Rand) (time.Duration, error)) {
		r := rand.New(rand.NewPCG(1, 2))
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			d, err := op(r)
			if err != nil {
				b.Fatal(err)
			}
			lat = append(lat, d)
		}
		slices.Sort(lat)
		b.ReportMetric(ledgerMS(ledgerPercentile(lat, 0.50)), "p50-ms")
		b.ReportMetric(ledgerMS(ledgerPercentile(lat, 0.99)), "p99-ms")
	}
	b.Run("after", func(b *testing.B) {
		run(b, func(r *rand.Rand) (time.Duration, error) {
			after := mine[r.IntN(len(mine)-auditPage)]
			env, d, err := bs.client.do("GET", fmt.Sprintf("/v1/events?limit=%d&after=%s", auditPage, url.QueryEscape(after.String())), bs.sa, "", "")
			if err != nil {
				return 0, err
			}
			return d, check(env.Data, &after)
		})
	})
	b.Run("page", func(b *testing.B) {
		run(b, func(r *rand.Rand) (time.Duration, error) {
			page := 1 + r.IntN(auditPerTenant/auditPage)
			env, d, err := bs.client.do("GET", fmt.Sprintf("/v1/events?limit=%d&page=%d", auditPage, page), bs.sa, "", "")
			if err != nil {
				return 0, err
			}
			return d, check(env.Data, nil)
		})
	})
	b.Run("store", func(b *testing.B) {
		tr, ok := bs.store.(eventstore.TenantReader)
		if !ok {
			b.Skip("the event store reads no tenant by index")
		}
		f := eventstore.TenantFilter{MerchantID: bs.merchantID, Environment: "test"}
		run(b, func(r *rand.Rand) (time.Duration, error) {
			after := mine[r.IntN(len(mine)-auditPage)]
			t := time.Now()
			evs, err := tr.ReadTenant(context.Background(), f, after, 0, auditPage)
			d := time.Since(t)
			if err == nil && len(evs) != auditPage {
				err = fmt.Errorf("%d events", len(evs))
			}
			return d, err
		})
	})
}
