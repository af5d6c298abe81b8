package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/eventstore"
)

// scanOnly hides a store's TenantReader, so eventstore.ReadTenant scans.
type scanOnly struct{ eventstore.Store }

// testTenantRead: one merchant environment's events, in global order,
// filtered by type (exact or prefix), time, position, skip and limit; the
// store's own TenantReader (if any) answers exactly as the scan does.
func testTenantRead(t *testing.T, s eventstore.Store) {
	ctx := ctxT(t, time.Minute)
	p := prefix()
	merchantA, merchantB := p+"-mA", p+"-mB"
	tagged := func(typ, m, env string, n int) eventstore.EventData {
		e := event(typ, n)
		e.Metadata = fmt.Appendf(nil, `{"merchantId":%q,"environment":%q,"actor":"k"}`, m, env)
		return e
	}
	var want []uuid.UUID
	var last eventstore.AppendResult
	for i := range 3 {
		a1 := tagged("escrow.created", merchantA, "test", i)
		a2 := tagged("payment.settled", merchantA, "test", i)
		want = append(want, a1.ID, a2.ID)
		last = mustAppend(t, s,
			eventstore.StreamAppend{Stream: fmt.Sprintf("%s-a-%d", p, i), Expected: eventstore.NoStream, Events: []eventstore.EventData{a1, a2}},
			eventstore.StreamAppend{Stream: fmt.Sprintf("%s-l-%d", p, i), Expected: eventstore.NoStream,
				Events: []eventstore.EventData{tagged("escrow.created", merchantA, "live", i)}},
			eventstore.StreamAppend{Stream: fmt.Sprintf("%s-b-%d", p, i), Expected: eventstore.NoStream,
				Events: []eventstore.EventData{tagged("escrow.created", merchantB, "test", i), event("escrow.created", i)}})
	}
	WaitReadable(t, s, last.Position)
	f := eventstore.TenantFilter{MerchantID: merchantA, Environment: "test"}
	for _, store := range []eventstore.Store{s, scanOnly{s}} {
		read := func(f eventstore.TenantFilter, after eventstore.Position, skip, limit int) []eventstore.RecordedEvent {
			t.Helper()
			got, err := eventstore.ReadTenant(ctx, store, f, after, skip, limit)
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		all := read(f, eventstore.Start, 0, 100)
		sameIDs(t, "the tenant's events", recIDs(all), want)
		for i := 1; i < len(all); i++ {
			if !all[i-1].Position.Less(all[i].Position) {
				t.Fatalf("out of order at %d", i)
			}
		}
		if n, err := eventstore.CountTenant(ctx, store, f); err != nil || n != 6 {
			t.Fatalf("count %d %v", n, err)
		}
		sameIDs(t, "after the second", recIDs(read(f, all[1].Position, 0, 100)), want[2:])
		sameIDs(t, "skip 1 limit 2", recIDs(read(f, eventstore.Start, 1, 2)), want[1:3])
		exact := f
		exact.Type = "payment.settled"
		sameIDs(t, "exact type", recIDs(read(exact, eventstore.Start, 0, 100)), []uuid.UUID{want[1], want[3], want[5]})
		if n, _ := eventstore.CountTenant(ctx, store, exact); n != 3 {
			t.Fatalf("count of the exact type %d", n)
		}
		prefixed := f
		prefixed.Type = "escrow."
		sameIDs(t, "type prefix", recIDs(read(prefixed, eventstore.Start, 0, 100)), []uuid.UUID{want[0], want[2], want[4]})
		partial := f
		partial.Type = "escrow" // not a prefix: no type is exactly "escrow"
		sameIDs(t, "a prefix without its dot", recIDs(read(partial, eventstore.Start, 0, 100)), nil)
		late := f
		late.From = time.Now().Add(time.Hour)
		sameIDs(t, "from the future", recIDs(read(late, eventstore.Start, 0, 100)), nil)
		early := f
		early.To = time.Now().Add(-time.Hour)
		sameIDs(t, "until an hour ago", recIDs(read(early, eventstore.Start, 0, 100)), nil)
		window := f
		window.From, window.To = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		sameIDs(t, "within the hour", recIDs(read(window, eventstore.Start, 0, 100)), want)
		live := eventstore.TenantFilter{MerchantID: merchantA, Environment: "live"}
		if got := read(live, eventstore.Start, 0, 100); len(got) != 3 {
			t.Fatalf("live: %d events", len(got))
		}
	}
}
