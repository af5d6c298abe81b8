package projections

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/eventstore"
)

// The audit trail's fill counts and marks a tenant's events as its
// projector does: a rebuild of a log long enough for several marks of
// several keys gives the rows applying it gave, in small pages too.
func TestAuditTrailFillEqualsApply(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	meta := func(m string) []byte {
		return fmt.Appendf(nil, `{%q: %q, %q: "test"}`, eventstore.MetaMerchantKey, m, eventstore.MetaEnvironmentKey)
	}
	var last eventstore.Position
	for done := 0; done < 5000; done += 100 {
		var evs []eventstore.EventData
		for i := range 100 {
			typ := []string{"escrow.created", "escrow.funded", "payment.settled"}[(done+i)%3]
			evs = append(evs, eventstore.EventData{ID: uuid.New(), Type: typ, Data: []byte(`{}`),
				Metadata: meta([]string{"m1", "m2"}[(done+i)%7/6])})
		}
		res, err := e.store.Append(ctx, eventstore.StreamAppend{Stream: fmt.Sprintf("s-%d", done%3), Expected: eventstore.Any, Events: evs})
		if err != nil {
			t.Fatal(err)
		}
		last = res.Position
	}
	ps := []Projector{AuditTrail{}}
	r := testRunner(e.store, e.pool, e.log, ps...)
	stop := start(t, r)
	if err := r.WaitFor(ctx, last); err != nil {
		t.Fatal(err)
	}
	stop()
	applied := dumpReadModels(t, e, ps)
	if n := count(t, e.pool, `SELECT count(*) FROM rm_event_marks WHERE key = 'events'`); n != 4 {
		t.Fatalf("%d marks of the key events, want 4", n)
	}
	if err := RebuildAll(ctx, e.pool, e.store, ps, e.log, nil); err != nil {
		t.Fatal(err)
	}
	compareDumps(t, "rebuild", applied, dumpReadModels(t, e, ps))
	defer func(page, hold int) { rebuildPage, fillHold = page, hold }(rebuildPage, fillHold)
	rebuildPage, fillHold = 7, 0
	if err := RebuildAll(ctx, e.pool, e.store, ps, e.log, nil); err != nil {
		t.Fatal(err)
	}
	compareDumps(t, "rebuild in small pages", applied, dumpReadModels(t, e, ps))
}
