package httpapi

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/category"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
)

const (
	catCreated  = "Category created successfully"
	catUpdated  = "Category updated successfully"
	catFetched  = "Category fetched successfully"
	catsFetched = "Categories fetched successfully"
	catDeleted  = "Category deleted successfully"
	catNotFound = "Category not found"
	catTaken    = "A category with this name already exists"
)

// categoryClient drives the category routes with one key and host.
type categoryClient struct {
	h         *harness
	key, host string
}

func (cc categoryClient) create(body any) resp {
	return cc.h.do(req{method: "POST", path: "/v1/escrow/category/create", key: cc.key, host: cc.host, body: body})
}

func (cc categoryClient) edit(id string, body any) resp {
	return cc.h.do(req{method: "PUT", path: "/v1/escrow/category/edit/" + id, key: cc.key, host: cc.host, body: body})
}

func (cc categoryClient) get(id string) resp {
	return cc.h.do(req{path: "/v1/escrow/category/get/" + id, key: cc.key, host: cc.host})
}

func (cc categoryClient) del(id string) resp {
	return cc.h.do(req{method: "DELETE", path: "/v1/escrow/category/delete/" + id, key: cc.key, host: cc.host})
}

// list returns one page's rows and pagination.
func (cc categoryClient) list(t *testing.T, query string) ([]map[string]any, map[string]any) {
	t.Helper()
	r := cc.h.do(req{path: "/v1/escrow/category/get" + query, key: cc.key, host: cc.host}).expect(t, 200, catsFetched).obj()
	rows, ok := r["data"].([]any)
	if !ok {
		t.Fatalf("list data.data is not an array: %v", r)
	}
	out := make([]map[string]any, len(rows))
	for i, row := range rows {
		out[i] = row.(map[string]any)
	}
	return out, r["pagination"].(map[string]any)
}

func (cc categoryClient) names(t *testing.T) []string {
	t.Helper()
	rows, _ := cc.list(t, "?limit=100")
	var out []string
	for _, r := range rows {
		out = append(out, r["name"].(string))
	}
	return out
}

func catBody(name string, extra ...any) map[string]any {
	b := map[string]any{"name": name}
	for i := 0; i+1 < len(extra); i += 2 {
		b[extra[i].(string)] = extra[i+1]
	}
	return b
}

func TestCategoryLifecycle(t *testing.T) {
	h := newHarness(t)
	std := categoryClient{h: h, key: h.std()}
	sa := categoryClient{h: h, key: h.sa()}

	if rows, pg := std.list(t, ""); len(rows) != 0 || pg["count"] != 0.0 || pg["pages"] != 1.0 || pg["isLastPage"] != true {
		t.Fatalf("empty list %v %v", rows, pg)
	}

	// The record: trimmed, every field, timestamps ISO 8601 UTC.
	rec := std.create(catBody("  Electronics ", "description", " Phones and laptops ")).expect(t, 201, catCreated).obj()
	id, _ := rec["id"].(string)
	if !recordIDShape.MatchString(id) || rec["name"] != "Electronics" || rec["description"] != "Phones and laptops" ||
		rec["merchantId"] != h.m.MerchantID || rec["environment"] != "test" || rec["createdAt"] != rec["updatedAt"] || len(rec) != 9 ||
		rec["imageUrl"] != "" || rec["position"] != 1.0 {
		t.Fatalf("record %v", rec)
	}
	if ts, _ := rec["createdAt"].(string); !strings.HasSuffix(ts, "Z") {
		t.Fatalf("createdAt %v", rec["createdAt"])
	} else if _, err := time.Parse(time.RFC3339, ts); err != nil {
		t.Fatal(err)
	}
	// Read after write: GET shows it at once, exactly as POST returned it;
	// the other key role reads it too.
	for _, cc := range []categoryClient{std, sa} {
		if got := cc.get(id).expect(t, 200, catFetched).obj(); fmt.Sprint(got) != fmt.Sprint(rec) {
			t.Fatalf("get %v, want %v", got, rec)
		}
	}
	if rows, _ := std.list(t, ""); len(rows) != 1 || fmt.Sprint(rows[0]) != fmt.Sprint(rec) {
		t.Fatalf("list %v", rows)
	}
	// Description is optional; customer-id is ignored, even one naming nobody.
	food := h.do(req{method: "POST", path: "/v1/escrow/category/create", key: h.sa(), cid: "nobody", body: catBody("Food")}).
		expect(t, 201, catCreated).obj()
	if food["description"] != "" || food["name"] != "Food" {
		t.Fatalf("food %v", food)
	}
	foodID := food["id"].(string)
	h.do(req{path: "/v1/escrow/category/get/" + foodID, key: h.std(), cid: "nobody"}).expect(t, 200, catFetched)
	h.do(req{path: "/v1/escrow/category/get", key: h.std(), cid: "nobody"}).expect(t, 200, catsFetched)

	// Create errors.
	for _, c := range []struct {
		name string
		body any
		msg  string
	}{
		{"missing name", map[string]any{"description": "x"}, "name is required"},
		{"empty body", nil, "name is required"},
		{"blank name", catBody("   "), "name is required"},
		{"name too long", catBody(strings.Repeat("x", 101)), "name must be at most 100 characters"},
		{"description too long", catBody("Books", "description", strings.Repeat("x", 501)), "description must be at most 500 characters"},
		{"duplicate", catBody("Electronics"), catTaken},
		{"duplicate in another case", catBody("eLECTRONICS"), catTaken},
		{"duplicate with spaces", catBody("  food  "), catTaken},
		{"wrong type", map[string]any{"name": 5}, "name has the wrong type"},
		{"malformed JSON", "{nope", "Invalid JSON body"},
	} {
		t.Run("create "+c.name, func(t *testing.T) { std.create(c.body).expect(t, 400, c.msg) })
	}
	// The limits themselves are fine.
	long := std.create(catBody(strings.Repeat("é", 100), "description", strings.Repeat("ü", 500))).expect(t, 201, catCreated).obj()

	// Edit.
	got := std.edit(id, map[string]any{"name": " Gadgets ", "description": "Small devices"}).expect(t, 200, catUpdated).obj()
	if got["id"] != id || got["name"] != "Gadgets" || got["description"] != "Small devices" || got["createdAt"] != rec["createdAt"] ||
		got["updatedAt"] == rec["updatedAt"] {
		t.Fatalf("edited %v", got)
	}
	if g := std.get(id).expect(t, 200, catFetched).obj(); fmt.Sprint(g) != fmt.Sprint(got) {
		t.Fatalf("get after edit %v, want %v", g, got)
	}
	// Description alone, name kept; then cleared.
	got = sa.edit(id, map[string]any{"description": "Tiny devices"}).expect(t, 200, catUpdated).obj()
	if got["name"] != "Gadgets" || got["description"] != "Tiny devices" {
		t.Fatalf("description edit %v", got)
	}
	if got = std.edit(id, map[string]any{"description": ""}).expect(t, 200, catUpdated).obj(); got["description"] != "" {
		t.Fatalf("description cleared %v", got)
	}
	// Nothing changed: 200 with the record as it is.
	same := std.edit(id, map[string]any{"name": "Gadgets"}).expect(t, 200, catUpdated).obj()
	if fmt.Sprint(same) != fmt.Sprint(got) {
		t.Fatalf("no-op edit %v, want %v", same, got)
	}
	// The old name is free again; a change of case keeps the new one.
	std.create(catBody("electronics")).expect(t, 201, catCreated)
	if got = std.edit(id, catBody("GADGETS")).expect(t, 200, catUpdated).obj(); got["name"] != "GADGETS" {
		t.Fatalf("case change %v", got)
	}
	std.create(catBody("gadgets")).expect(t, 400, catTaken)

	for _, c := range []struct {
		name, id string
		body     any
		status   int
		msg      string
	}{
		{"nothing sent", id, map[string]any{}, 400, "Provide name or description"},
		{"empty body", id, nil, 400, "Provide name or description"},
		{"nulls", id, map[string]any{"name": nil, "description": nil}, 400, "Provide name or description"},
		{"blank name", id, catBody(" "), 400, "name is required"},
		{"name too long", id, catBody(strings.Repeat("x", 101)), 400, "name must be at most 100 characters"},
		{"description too long", id, map[string]any{"description": strings.Repeat("x", 501)}, 400, "description must be at most 500 characters"},
		{"taken name", id, catBody("FOOD"), 400, catTaken},
		{"taken name of another case", foodID, catBody("gadgets"), 400, catTaken},
		{"wrong type", id, map[string]any{"description": true}, 400, "description has the wrong type"},
		{"malformed JSON", id, "[", 400, "Invalid JSON body"},
		{"unknown id", "unknown", catBody("x"), 404, catNotFound},
	} {
		t.Run("edit "+c.name, func(t *testing.T) { std.edit(c.id, c.body).expect(t, c.status, c.msg) })
	}
	if g := std.get(id).expect(t, 200, "").obj(); fmt.Sprint(g) != fmt.Sprint(got) {
		t.Fatalf("refused edits changed %v into %v", got, g)
	}

	// Delete.
	std.get("unknown").expect(t, 404, catNotFound)
	std.del("unknown").expect(t, 404, catNotFound)
	del := std.del(id).expect(t, 200, catDeleted)
	if d := del.obj(); d == nil || len(d) != 0 {
		t.Fatalf("delete data %s", del.Raw)
	}
	std.get(id).expect(t, 404, catNotFound)
	std.edit(id, catBody("x")).expect(t, 404, catNotFound)
	std.del(id).expect(t, 404, catNotFound)
	for _, n := range std.names(t) {
		if n == "GADGETS" {
			t.Fatal("deleted category listed")
		}
	}
	// The deleted name is free: a new category, under a new id.
	again := sa.create(catBody("Gadgets")).expect(t, 201, catCreated).obj()
	if again["id"] == id {
		t.Fatalf("re-created %v", again)
	}
	if names := std.names(t); fmt.Sprint(names) != fmt.Sprint([]string{"Gadgets", "electronics", long["name"].(string), "Food"}) {
		t.Fatalf("names %v", names)
	}

	// Auth.
	h.do(req{path: "/v1/escrow/category/get"}).expect(t, 401, "No token provided")
	h.do(req{method: "POST", path: "/v1/escrow/category/create", body: catBody("x")}).expect(t, 401, "No token provided")
	h.do(req{path: "/v1/escrow/category/get", key: "sk_test_nope"}).expect(t, 403, "Unauthorized Access")

	// Idempotency keys apply to the writes.
	idem := map[string]string{"Idempotency-Key": "cat-1"}
	r1 := h.do(req{method: "POST", path: "/v1/escrow/category/create", key: h.std(), body: catBody("Toys"), headers: idem}).expect(t, 201, catCreated)
	r2 := h.do(req{method: "POST", path: "/v1/escrow/category/create", key: h.std(), body: catBody("Toys"), headers: idem})
	if r2.Status != 201 || string(r2.Raw) != string(r1.Raw) || r2.Header.Get("Idempotency-Replayed") != "true" {
		t.Fatalf("replay %d %s", r2.Status, r2.Raw)
	}
	// The write and its claim marker are one append (one transaction), so
	// a retry that takes an abandoned claim over knows whether it wrote.
	evs, err := h.store.ReadAll(context.Background(), eventstore.Start, 100_000)
	if err != nil {
		t.Fatal(err)
	}
	commits := map[string][]uint64{}
	for _, e := range evs {
		commits[e.Type] = append(commits[e.Type], e.Position.Commit)
	}
	if w, c := commits["idempotency.write"], commits["category.created"]; len(w) != 1 || c[len(c)-1] != w[0] {
		t.Fatalf("claim marker commits %v, category commits %v: want one marker, in the last create's transaction", w, c)
	}
}

// Ten concurrent creates of one name, in several cases, make one category.
func TestConcurrentCategoryCreates(t *testing.T) {
	h := newHarness(t)
	const n = 10
	var wg sync.WaitGroup
	out := make([]resp, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			name := []string{"Fashion", "FASHION", "fashion", " Fashion "}[i%4]
			k := h.std()
			if i%2 == 1 {
				k = h.sa()
			}
			out[i] = h.do(req{method: "POST", path: "/v1/escrow/category/create", key: k, body: catBody(name)})
		}(i)
	}
	wg.Wait()
	created := 0
	for _, r := range out {
		switch {
		case r.Status == 201 && r.Message == catCreated:
			created++
		case r.Status == 400 && r.Message == catTaken:
		default:
			t.Fatalf("unexpected %d %s", r.Status, r.Raw)
		}
	}
	if created != 1 {
		t.Fatalf("%d categories created with one name", created)
	}
	if rows, pg := (categoryClient{h: h, key: h.std()}).list(t, ""); len(rows) != 1 || pg["count"] != 1.0 {
		t.Fatalf("list %v %v", rows, pg)
	}
}

// Categories belong to one merchant and environment: nobody else sees,
// edits or deletes them, and names are unique only within them.
func TestCategoryTenancy(t *testing.T) {
	h := newHarness(t)
	mine := categoryClient{h: h, key: h.std()}
	other := h.newMerchant(false)
	theirs := categoryClient{h: h, key: key(other, domain.Test, merchant.SuperAdmin)}
	live := categoryClient{h: h, key: key(h.m, domain.Live, merchant.SuperAdmin), host: liveHost}

	id := mine.create(catBody("Food", "description", "Groceries")).expect(t, 201, catCreated).obj()["id"].(string)
	for name, cc := range map[string]categoryClient{"other merchant": theirs, "live": live} {
		t.Run(name, func(t *testing.T) {
			cc.get(id).expect(t, 404, catNotFound)
			cc.edit(id, catBody("Mine now")).expect(t, 404, catNotFound)
			cc.del(id).expect(t, 404, catNotFound)
			if rows, pg := cc.list(t, ""); len(rows) != 0 || pg["count"] != 0.0 {
				t.Fatalf("sees %v", rows)
			}
			// The name is free for them, and theirs is invisible to us.
			rec := cc.create(catBody("FOOD")).expect(t, 201, catCreated).obj()
			mine.get(rec["id"].(string)).expect(t, 404, catNotFound)
			mine.edit(rec["id"].(string), catBody("x")).expect(t, 404, catNotFound)
			mine.del(rec["id"].(string)).expect(t, 404, catNotFound)
			if names := cc.names(t); fmt.Sprint(names) != "[FOOD]" {
				t.Fatalf("their names %v", names)
			}
		})
	}
	if live := (categoryClient{h: h, key: key(h.m, domain.Live, merchant.Standard), host: liveHost}).names(t); fmt.Sprint(live) != "[FOOD]" {
		t.Fatalf("live names %v", live)
	}
	got := mine.get(id).expect(t, 200, catFetched).obj()
	if got["name"] != "Food" || got["description"] != "Groceries" {
		t.Fatalf("untouched %v", got)
	}
	if names := mine.names(t); fmt.Sprint(names) != "[Food]" {
		t.Fatalf("my names %v", names)
	}
	// A test key on the live host is refused before it reaches the category.
	h.do(req{path: "/v1/escrow/category/get/" + id, key: h.std(), host: liveHost}).expect(t, 403, "Unauthorized Access")
}

func TestCategoryPaging(t *testing.T) {
	h := newHarness(t)
	cc := categoryClient{h: h, key: h.std()}
	actor := appActor(h)
	var (
		ids  []string
		last eventstore.Position
	)
	for i := 0; i < 105; i++ {
		id, pos, err := h.svc.CreateCategory(context.Background(), actor, category.New{Name: fmt.Sprintf("Category %03d", i)}, 0)
		if err != nil {
			t.Fatal(err)
		}
		ids, last = append(ids, id), pos
	}
	h.wait(last)

	rows, pg := cc.list(t, "?page=1&limit=40")
	if len(rows) != 40 || pg["count"] != 105.0 || pg["pages"] != 3.0 || pg["isLastPage"] != false || pg["nextPage"] != 2.0 || pg["previousPage"] != nil {
		t.Fatalf("page 1: %d rows, %v", len(rows), pg)
	}
	if rows[0]["id"] != ids[104] || rows[39]["id"] != ids[65] {
		t.Fatalf("not newest first: %v ... %v", rows[0], rows[39])
	}
	rows, pg = cc.list(t, "?page=3&limit=40")
	if len(rows) != 25 || pg["isLastPage"] != true || pg["nextPage"] != nil || pg["previousPage"] != 2.0 || rows[24]["id"] != ids[0] {
		t.Fatalf("page 3: %d rows, %v", len(rows), pg)
	}
	// Every record exactly once across the pages.
	seen := map[string]bool{}
	for p := 1; p <= 3; p++ {
		rows, _ := cc.list(t, fmt.Sprintf("?page=%d&limit=40", p))
		for _, r := range rows {
			seen[r["id"].(string)] = true
		}
	}
	if len(seen) != 105 {
		t.Fatalf("pages covered %d categories", len(seen))
	}
	// Beyond the last page: empty.
	if rows, pg = cc.list(t, "?page=9&limit=40"); len(rows) != 0 || pg["isLastPage"] != true {
		t.Fatalf("page 9: %d rows %v", len(rows), pg)
	}
	// Default 10, ceiling 100, fallbacks.
	for q, want := range map[string]int{"": 10, "?limit=500": 100, "?limit=100": 100, "?limit=abc&page=-3": 10, "?limit=0": 10, "?limit=-5": 10} {
		if rows, _ := cc.list(t, q); len(rows) != want {
			t.Fatalf("%q: %d rows, want %d", q, len(rows), want)
		}
	}
	if _, pg = cc.list(t, "?limit=500"); pg["pages"] != 2.0 {
		t.Fatalf("capped pagination %v", pg)
	}
	// Deleting one shrinks the count.
	cc.del(ids[50]).expect(t, 200, catDeleted)
	if _, pg = cc.list(t, ""); pg["count"] != 104.0 || pg["pages"] != 11.0 {
		t.Fatalf("after a delete %v", pg)
	}
}

// appActor acts for the harness merchant's test environment, to seed data
// through the application directly.
func appActor(h *harness) app.Actor {
	return app.Actor{MerchantID: h.m.MerchantID, Environment: domain.Test, KeyID: "seed"}
}

// On a route that ignores customer-id (a category is the merchant's), the
// header does not change who acts, so it does not change whose key an
// Idempotency-Key is either: a retry that happens to carry a customer-id,
// or another one, is the same request and replays the first outcome
// instead of running again.
func TestCategoryIdempotencyKeyIgnoresCustomerID(t *testing.T) {
	h := newHarness(t)
	cid := h.createCustomer(h.sa(), "c@x.com", "08035557101")
	idem := map[string]string{"Idempotency-Key": "cat-cid-1"}
	create := func(cid string) resp {
		return h.do(req{method: "POST", path: "/v1/escrow/category/create", key: h.std(), cid: cid, body: catBody("Toys"), headers: idem})
	}
	first := create("").expect(t, 201, catCreated)
	for _, c := range []string{cid, "nobody", ""} {
		again := create(c)
		if again.Status != 201 || string(again.Raw) != string(first.Raw) || again.Header.Get("Idempotency-Replayed") != "true" {
			t.Fatalf("retry with customer-id %q: %d %s (replayed %q), want the replay of %s",
				c, again.Status, again.Raw, again.Header.Get("Idempotency-Replayed"), first.Raw)
		}
	}
	// The other way round: the first request carried a customer-id.
	idem["Idempotency-Key"] = "cat-cid-2"
	body := catBody("Games")
	second := h.do(req{method: "POST", path: "/v1/escrow/category/create", key: h.std(), cid: cid, body: body, headers: idem}).expect(t, 201, catCreated)
	again := h.do(req{method: "POST", path: "/v1/escrow/category/create", key: h.std(), body: body, headers: idem})
	if string(again.Raw) != string(second.Raw) || again.Header.Get("Idempotency-Replayed") != "true" {
		t.Fatalf("retry without customer-id: %d %s, want the replay of %s", again.Status, again.Raw, second.Raw)
	}
}
