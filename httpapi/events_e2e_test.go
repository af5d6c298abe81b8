package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
)

// storedTenantEvents lists the ids of every stored event whose metadata
// names the merchant and environment, in commit order: decoded here, not
// through the index the API reads, so that a wrong query shows.
func (h *harness) storedTenantEvents(merchantID string, env domain.Environment) []string {
	h.t.Helper()
	h.caughtUp()
	rows, err := h.pool.Query(context.Background(), `SELECT event_id::text, metadata::text FROM es_events ORDER BY tx_id, seq`)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		var meta *string
		if err := rows.Scan(&id, &meta); err != nil {
			h.t.Fatal(err)
		}
		var m domain.Meta
		if meta != nil && json.Unmarshal([]byte(*meta), &m) == nil && m.MerchantID == merchantID && m.Environment == env {
			out = append(out, id)
		}
	}
	if err := rows.Err(); err != nil {
		h.t.Fatal(err)
	}
	return out
}

type auditPage struct {
	Data []struct {
		ID        string          `json:"id"`
		Type      string          `json:"type"`
		Position  string          `json:"position"`
		StreamID  string          `json:"streamId"`
		CreatedAt string          `json:"createdAt"`
		Data      json.RawMessage `json:"data"`
	} `json:"data"`
	Pagination *struct {
		Count int64 `json:"count"`
		Pages int64 `json:"pages"`
	} `json:"pagination"`
	NextAfter *string `json:"nextAfter"`
	HasMore   *bool   `json:"hasMore"`
}

func (h *harness) auditTrail(k, host, query string) auditPage {
	h.t.Helper()
	r := h.do(req{path: "/v1/events" + query, key: k, host: host}).expect(h.t, 200, "Events fetched successfully")
	var env struct {
		Data auditPage `json:"data"`
	}
	if err := json.Unmarshal(r.Raw, &env); err != nil {
		h.t.Fatalf("%s: %v", r.Raw, err)
	}
	return env.Data
}

func (p auditPage) ids() []string {
	out := make([]string, len(p.Data))
	for i, e := range p.Data {
		out[i] = e.ID
	}
	return out
}

// TestAuditTrailIsolation: a super-admin key sees its
// merchant's events of its environment only, in commit order, with
// secrets and key digests redacted; other merchants' and the other
// environment's never appear.
func TestAuditTrailIsolation(t *testing.T) {
	h := newHarness(t)
	other := h.newMerchant(true)
	live := key(h.m, domain.Live, merchant.SuperAdmin)
	a := h.createCustomer(h.sa(), "a@x.com", "08031110001")
	h.topUp(a, 5000).expect(t, 200, "")
	h.do(req{method: "POST", path: "/v1/customer/create", key: h.sa(), body: map[string]any{"firstname": "Bo", "lastname": "Ade",
		"email": "bvn@x.com", "phone": "08031110009", "bvn": "22212345678"}}).expect(t, 201, "")
	h.createCustomer(key(other, domain.Test, merchant.SuperAdmin), "b@x.com", "08031110002")
	h.do(req{method: "POST", path: "/v1/customer/create", key: live, host: liveHost, body: map[string]any{"firstname": "Li",
		"lastname": "Ve", "email": "l@x.com", "phone": "08031110003"}}).expect(t, 201, "Customer created successfully")
	// A signing secret recorded with this environment's metadata, written
	// directly to the store as an operator tool could.
	meta := fmt.Appendf(nil, `{"merchantId":%q,"environment":"test","actor":"operator"}`, h.m.MerchantID)
	res, err := h.store.Append(context.Background(), eventstore.StreamAppend{Stream: app.MerchantKind.StreamName(h.m.MerchantID),
		Expected: eventstore.Any, Events: []eventstore.EventData{{ID: uuid.New(), Type: "merchant.signing_secret_rotated",
			Data: []byte(`{"environment":"test","secret":"whsec_must_not_show"}`), Metadata: meta}}})
	if err != nil {
		t.Fatal(err)
	}
	h.wait(res.Position)

	want := h.storedTenantEvents(h.m.MerchantID, domain.Test)
	got := h.auditTrail(h.sa(), "", "?limit=500")
	if fmt.Sprint(got.ids()) != fmt.Sprint(want) || got.Pagination == nil || got.Pagination.Count != int64(len(want)) || len(want) < 5 {
		t.Fatalf("audit trail %v (pagination %+v), want %v", got.ids(), got.Pagination, want)
	}
	raw, _ := json.Marshal(got)
	for _, secret := range []string{"whsec_must_not_show", "22212345678", "digest\":\"" + "0"} {
		if strings.Contains(string(raw), secret) {
			t.Fatalf("the audit trail shows %q: %s", secret, raw)
		}
	}
	types := map[string]bool{}
	for i, e := range got.Data {
		types[e.Type] = true
		if _, err := time.Parse(time.RFC3339, e.CreatedAt); err != nil || e.StreamID == "" || e.Position == "" {
			t.Fatalf("event %+v", e)
		}
		if i > 0 {
			prev, _ := eventstore.ParsePosition(got.Data[i-1].Position)
			cur, _ := eventstore.ParsePosition(e.Position)
			if !prev.Less(cur) {
				t.Fatalf("not in commit order at %d: %s then %s", i, got.Data[i-1].Position, e.Position)
			}
		}
		if e.Type == "merchant.signing_secret_rotated" && !strings.Contains(string(e.Data), `"secret":"[redacted]"`) {
			t.Fatalf("secret shown as %s", e.Data)
		}
		if e.Type == "customer.created" && strings.Contains(string(e.Data), `"bvn"`) && !strings.Contains(string(e.Data), `*******5678`) {
			t.Fatalf("bvn shown as %s", e.Data)
		}
	}
	if !types["customer.created"] || !types["merchant.signing_secret_rotated"] {
		t.Fatalf("types %v", types)
	}
	otherIDs := h.storedTenantEvents(other.MerchantID, domain.Test)
	liveIDs := h.storedTenantEvents(h.m.MerchantID, domain.Live)
	if len(otherIDs) == 0 || len(liveIDs) == 0 {
		t.Fatalf("the other tenants wrote nothing: %d %d", len(otherIDs), len(liveIDs))
	}
	seen := map[string]bool{}
	for _, id := range got.ids() {
		seen[id] = true
	}
	for _, id := range append(otherIDs, liveIDs...) {
		if seen[id] {
			t.Fatalf("another tenant's event %s in the audit trail", id)
		}
	}
	// The live key sees the live events only; the other merchant its own.
	if l := h.auditTrail(live, liveHost, ""); fmt.Sprint(l.ids()) != fmt.Sprint(liveIDs) {
		t.Fatalf("live trail %v, want %v", l.ids(), liveIDs)
	}
	if o := h.auditTrail(key(other, domain.Test, merchant.SuperAdmin), "", ""); fmt.Sprint(o.ids()) != fmt.Sprint(otherIDs) {
		t.Fatalf("other merchant's trail %v, want %v", o.ids(), otherIDs)
	}

	// Access: super-admin only, customer-id forbidden.
	h.do(req{path: "/v1/events", key: h.std()}).expect(t, 401, "Access denied")
	h.do(req{path: "/v1/events", key: h.sa(), cid: a}).expect(t, 400, "customer-id is not allowed in request header")
	h.do(req{path: "/v1/events?after=yesterday", key: h.sa()}).expect(t, 400, "after must be a position (commit/prepare) from this API, or 0")
	h.do(req{path: "/v1/events?fromDate=soon", key: h.sa()}).expect(t, 400, "fromDate must be a date (YYYY-MM-DD) or an RFC 3339 time")

	// Filters.
	exact := h.auditTrail(h.sa(), "", "?type=customer.created")
	prefix := h.auditTrail(h.sa(), "", "?type=customer.")
	if len(exact.Data) != 2 || len(prefix.Data) < 2 {
		t.Fatalf("exact %d, prefix %d", len(exact.Data), len(prefix.Data))
	}
	for _, e := range prefix.Data {
		if !strings.HasPrefix(e.Type, "customer.") {
			t.Fatalf("prefix filter let %s through", e.Type)
		}
	}
	if n := len(h.auditTrail(h.sa(), "", "?type=customer").Data); n != 0 {
		t.Fatalf("a type without its dot is exact: %d events", n)
	}
	today := time.Now().UTC().Format(time.DateOnly)
	if n := len(h.auditTrail(h.sa(), "", "?limit=500&fromDate="+today+"&toDate="+today).Data); n != len(want) {
		t.Fatalf("today: %d events, want %d", n, len(want))
	}
	tomorrow := time.Now().UTC().AddDate(0, 0, 1).Format(time.DateOnly)
	yesterday := time.Now().UTC().AddDate(0, 0, -1).Format(time.DateOnly)
	if n := len(h.auditTrail(h.sa(), "", "?fromDate="+tomorrow).Data) + len(h.auditTrail(h.sa(), "", "?toDate="+yesterday).Data); n != 0 {
		t.Fatalf("outside the dates: %d events", n)
	}
	// Pages: limit 2, page 2 is the third and fourth event.
	p2 := h.auditTrail(h.sa(), "", "?limit=2&page=2")
	if fmt.Sprint(p2.ids()) != fmt.Sprint(want[2:4]) || p2.Pagination.Count != int64(len(want)) {
		t.Fatalf("page 2 %v, want %v", p2.ids(), want[2:4])
	}
	if n := len(h.auditTrail(h.sa(), "", "").Data); n != min(len(want), 100) {
		t.Fatalf("default limit: %d", n)
	}
}

// TestAuditTrailAfterWhileWriting: incremental sync with after sees every
// event of the tenant exactly once, in commit order, while other clients
// keep writing (with transactions that commit out of order).
func TestAuditTrailAfterWhileWriting(t *testing.T) {
	h := newHarness(t)
	other := h.newMerchant(true)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil && i < 60; i++ {
				m := h.m.MerchantID
				if i%3 == 0 {
					m = other.MerchantID
				}
				a := app.Actor{MerchantID: m, Environment: domain.Test}
				_, _, err := h.svc.CreateCustomer(ctx, a, customer.NewCustomer{Firstname: "W", Lastname: "R",
					Email: fmt.Sprintf("w%d-%d@x.com", w, i), Phone: fmt.Sprintf("0803%d%06d", w, i)})
				if err != nil && ctx.Err() == nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	writing := make(chan struct{})
	go func() { wg.Wait(); close(writing) }()
	var got []string
	after := "0"
	done := false
	for !done {
		select {
		case <-writing:
			done = true // one more full pass after the writers stopped
		default:
		}
		for {
			p := h.auditTrail(h.sa(), "", "?limit=7&after="+url.QueryEscape(after))
			if p.NextAfter == nil || p.HasMore == nil || p.Pagination != nil {
				t.Fatalf("incremental answer %+v", p)
			}
			if len(p.Data) > 7 {
				t.Fatalf("%d events for limit 7", len(p.Data))
			}
			got = append(got, p.ids()...)
			if len(p.Data) > 0 && *p.NextAfter != p.Data[len(p.Data)-1].Position {
				t.Fatalf("nextAfter %s is not the last event's position", *p.NextAfter)
			}
			if pa, _ := eventstore.ParsePosition(after); len(p.Data) == 0 && *p.NextAfter != pa.String() {
				t.Fatalf("an empty page moved nextAfter from %s to %s", after, *p.NextAfter)
			}
			after = *p.NextAfter
			if !*p.HasMore {
				break
			}
		}
	}
	cancel()
	want := h.storedTenantEvents(h.m.MerchantID, domain.Test)
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("event %s seen %d times", id, n)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(want) < 160 {
		t.Fatalf("synced %d events, stored %d", len(got), len(want))
	}
}
