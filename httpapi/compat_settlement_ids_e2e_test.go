package httpapi

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/internal/audit"
	"github.com/escrowd/escrowd/projections"
)

// TestSettlementRecordIDsOfEarlierBuildsStillResolve: builds before the
// public API's id shapes named an escrow's settlement records
// "<escrow id>-<key>" (a release, a commission, a fee). Events written
// with such ids, found in the log by an upgraded service, keep working:
// read models rebuilt from them list them, cursors walk past them, the
// escrow settles its other milestones with new ids beside them, and the
// audit replays both clean.
func TestSettlementRecordIDsOfEarlierBuildsStillResolve(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	seller := h.createCustomer(h.sa(), "es@x.com", "08035558001")
	helper := h.createCustomer(h.sa(), "eh@x.com", "08035558002")
	buyer := h.funded("eb@x.com", "08035558003", 40000)
	e := h.createMilestones(seller, milestoneBody(helper)).expect(t, 201, "Milestone escrow created successfully").obj()
	id := e["id"].(string)
	ms := milestoneIDs(t, e)
	h.pay(buyer, "old-settle-1", 10250, id).expect(t, 200, "Payment successful")
	h.confirmMilestone(buyer, id, ms[0]).expect(t, 200, "")
	h.caughtUp()

	// Rewrite, as an earlier build wrote them, the ids of the records the
	// first release settled (they are named by the key its reference
	// spells: ESC-<escrow id>-<key>) in every event that carries them.
	rows, err := h.pool.Query(ctx, `SELECT DISTINCT r->>'id', r->>'reference'
		FROM es_events, json_array_elements(coalesce(data->'records', '[]'::json)) r
		WHERE r->>'reference' LIKE 'ESC-' || $1 || '-%'`, id)
	if err != nil {
		t.Fatal(err)
	}
	renamed := map[string]string{}
	for rows.Next() {
		var newID, ref string
		if err := rows.Scan(&newID, &ref); err != nil {
			t.Fatal(err)
		}
		renamed[newID] = id + "-" + strings.TrimPrefix(ref, "ESC-"+id+"-")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(renamed) == 0 {
		t.Fatal("the release settled no records named after the escrow")
	}
	h.projecting.stop()
	for newID, oldID := range renamed {
		tag, err := h.pool.Exec(ctx, `UPDATE es_events SET data = replace(data::text, '"'||$1||'"', '"'||$2||'"')::json
			WHERE data::text LIKE '%' || $1 || '%'`, newID, oldID)
		if err != nil || tag.RowsAffected() == 0 {
			t.Fatalf("rewriting %s: %v (%d events)", newID, err, tag.RowsAffected())
		}
	}
	if _, err := h.pool.Exec(ctx, `DELETE FROM es_snapshots`); err != nil {
		t.Fatal(err)
	}
	rebuildAll := func() {
		t.Helper()
		for _, p := range projections.All(wired.Sealer(h.store)) {
			if err := projections.Rebuild(ctx, h.pool, h.store, p, nil, nil); err != nil {
				t.Fatalf("rebuild %s: %v", p.Name(), err)
			}
		}
	}
	rebuildAll()
	h.projecting.start()

	// The upgraded service settles the next milestone with new ids.
	h.confirmMilestone(buyer, id, ms[1]).expect(t, 200, "")

	oldShape := regexp.MustCompile(`^` + regexp.QuoteMeta(id) + `-`)
	countShapes := func(ids []string) (old, current int) {
		for _, r := range ids {
			switch {
			case oldShape.MatchString(r):
				old++
			case recordIDShape.MatchString(r):
				current++
			}
		}
		return old, current
	}
	// The histories that show the settlement records, walked with
	// cursors: the first milestone's beneficiary's (earlier ids) and the
	// seller's (the second milestone, new ids).
	for _, c := range []struct {
		what, path, key, cid string
		wantOld, wantNew     bool
	}{
		{"the first milestone's beneficiary", "/v1/payment/history", h.std(), helper, true, false},
		{"the seller", "/v1/payment/history", h.std(), seller, false, true},
	} {
		walked := h.walk(c.path, c.key, c.cid, "id")
		if len(walked) != len(slicesCompact(walked)) {
			t.Fatalf("%s: a row walked twice: %v", c.what, walked)
		}
		old, current := countShapes(walked)
		if (old > 0) != c.wantOld || (current > 0) != c.wantNew {
			t.Fatalf("%s: %d records of the earlier shape, %d of the new: %v", c.what, old, current, walked)
		}
	}
	// A lookup by the record's reference finds it under its earlier id.
	for _, oldID := range renamed {
		ref := "ESC-" + oldID // ESC-<escrow id>-<key>
		found := h.do(req{path: "/v1/payment/history?reference=" + ref, key: h.std(), cid: helper}).expect(t, 200, "")
		if !strings.Contains(string(found.Raw), `"`+oldID+`"`) {
			t.Fatalf("reference %s: %s", ref, found.Raw)
		}
	}

	// The audit replays the earlier and the new records clean, after
	// another rebuild too.
	h.caughtUp()
	for round := range 2 {
		rep, err := audit.Run(ctx, h.store, h.pool, h.m.MerchantID)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Differences) != 0 {
			t.Fatalf("round %d: audit differences: %+v", round, rep.Differences)
		}
		h.projecting.stop()
		rebuildAll()
		h.projecting.start()
		h.caughtUp()
	}
	h.assertZeroSum()
}

// slicesCompact is ids without repeats (sorted).
func slicesCompact(ids []string) []string {
	s := slices.Clone(ids)
	slices.Sort(s)
	return slices.Compact(s)
}
