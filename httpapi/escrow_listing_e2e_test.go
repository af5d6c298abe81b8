package httpapi

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
)

// escrowPage is one page of an escrow listing: the rows' payment tokens
// and the pagination object.
func (h *harness) escrowPage(path, cid, msg string) ([]map[string]any, map[string]any) {
	h.t.Helper()
	return h.listingPageOf(path, h.std(), cid, msg)
}

// listingPageOf is one page of a listing read with key: its rows and the
// pagination object.
func (h *harness) listingPageOf(path, key, cid, msg string) ([]map[string]any, map[string]any) {
	h.t.Helper()
	r := h.do(req{path: path, key: key, cid: cid}).expect(h.t, 200, msg).obj()
	rows, ok := r["data"].([]any)
	if !ok {
		h.t.Fatalf("%s: data.data is not an array: %v", path, r)
	}
	out := make([]map[string]any, len(rows))
	for i, row := range rows {
		out[i] = row.(map[string]any)
	}
	pg, _ := r["pagination"].(map[string]any)
	return out, pg
}

func tokensOf(rows []map[string]any) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r["paymentToken"].(string)
	}
	return out
}

func sorted(s []string) string {
	s = append([]string{}, s...)
	sort.Strings(s)
	return strings.Join(s, ",")
}

// expectPagination compares the pagination object with count, pages,
// isLastPage, nextPage and previousPage (nil for null).
func expectPagination(t *testing.T, what string, pg map[string]any, count, pages float64, last bool, next, prev any) {
	t.Helper()
	if pg["count"] != count || pg["pages"] != pages || pg["isLastPage"] != last || pg["nextPage"] != next || pg["previousPage"] != prev {
		t.Fatalf("%s: pagination %v, want count %v pages %v isLastPage %v nextPage %v previousPage %v",
			what, pg, count, pages, last, next, prev)
	}
	for _, k := range []string{"count", "pages", "isLastPage", "nextPage", "previousPage"} {
		if _, ok := pg[k]; !ok {
			t.Fatalf("%s: pagination lacks %s: %v", what, k, pg)
		}
	}
}

func TestEscrowListingFilters(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035554001")
	buyer := h.funded("b@x.com", "08035554002", 10000)
	cats := categoryClient{h: h, key: h.std()}
	elec := cats.create(catBody("Electronics", "description", "Phones")).expect(t, 201, catCreated).obj()
	food := cats.create(catBody("Food")).expect(t, 201, catCreated).obj()
	elecID, foodID := elec["id"].(string), food["id"].(string)

	// Unknown, other merchant's and other environment's categories are
	// refused on create and edit; nothing is created.
	other := h.newMerchant(true)
	foreign := h.do(req{method: "POST", path: "/v1/escrow/category/create", key: key(other, domain.Test, merchant.Standard),
		body: catBody("Theirs")}).expect(t, 201, catCreated).obj()["id"].(string)
	live := h.do(req{method: "POST", path: "/v1/escrow/category/create", key: key(h.m, domain.Live, merchant.Standard), host: liveHost,
		body: catBody("Live")}).expect(t, 201, catCreated).obj()["id"].(string)
	for _, bad := range []string{"nope", foreign, live} {
		h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer", "categoryId": bad}, 1).
			expect(t, 404, "Category not found")
	}

	create := func(cat string) map[string]any {
		t.Helper()
		f := map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer"}
		if cat != "" {
			f["categoryId"] = cat
		}
		return h.createEscrow(seller, f, 0).expect(t, 201, "Escrow created successfully").obj()
	}
	var elecTokens, foodTokens, allTokens []string
	for i := 0; i < 3; i++ {
		e := create(elecID)
		// The escrow carries the category record as the category routes show it.
		if fmt.Sprint(e["category"]) != fmt.Sprint(withoutPosition(elec)) || e["categoryId"] != elecID {
			t.Fatalf("escrow category %v, want %v", e["category"], elec)
		}
		elecTokens = append(elecTokens, e["paymentToken"].(string))
	}
	for i := 0; i < 2; i++ {
		e := create(foodID)
		if fmt.Sprint(e["category"]) != fmt.Sprint(withoutPosition(food)) {
			t.Fatalf("escrow category %v, want %v", e["category"], food)
		}
		foodTokens = append(foodTokens, e["paymentToken"].(string))
	}
	plain := create("")
	if plain["category"] != nil || plain["categoryId"] != nil {
		t.Fatalf("uncategorised escrow %v", plain)
	}
	allTokens = append(append(append(allTokens, elecTokens...), foodTokens...), plain["paymentToken"].(string))
	if len(h.viewEscrow(elecTokens[0], "")["category"].(map[string]any)) == 0 {
		t.Fatal("verify lacks the category")
	}
	// Editing into an unknown category is refused too.
	h.do(req{method: "PUT", path: "/v1/escrow/edit/" + plain["paymentToken"].(string), key: h.std(), cid: seller,
		body: map[string]any{"categoryId": "nope"}}).expect(t, 404, "Category not found")
	// The merchant's own sale in Electronics: in the feeds, not in the seller's sales.
	own := h.do(req{method: "POST", path: "/v1/escrow/create", key: h.std(),
		body: map[string]any{"amount": 1000, "purpose": "x", "whoPays": "buyer", "categoryId": elecID}}).expect(t, 201, "").obj()
	ownToken := own["paymentToken"].(string)

	// transactions: categoryId filter and paging (limit 2 over 3 rows).
	const txMsg = "Transaction fetched successfully"
	p1, pg := h.escrowPage("/v1/escrow/transactions?type=sales&categoryId="+elecID+"&limit=2", seller, txMsg)
	expectPagination(t, "sales page 1", pg, 3, 2, false, 2.0, nil)
	p2, pg := h.escrowPage("/v1/escrow/transactions?type=sales&categoryId="+elecID+"&limit=2&page=2", seller, txMsg)
	expectPagination(t, "sales page 2", pg, 3, 2, true, nil, 1.0)
	if len(p1) != 2 || len(p2) != 1 || sorted(append(tokensOf(p1), tokensOf(p2)...)) != sorted(elecTokens) {
		t.Fatalf("sales pages %v + %v, want %v", tokensOf(p1), tokensOf(p2), elecTokens)
	}
	// Newest first across pages.
	if got := append(tokensOf(p1), tokensOf(p2)...); got[0] != elecTokens[2] || got[2] != elecTokens[0] {
		t.Fatalf("order %v, want newest first of %v", got, elecTokens)
	}
	for _, r := range append(p1, p2...) {
		if r["category"].(map[string]any)["id"] != elecID {
			t.Fatalf("row outside the category: %v", r)
		}
	}
	rows, pg := h.escrowPage("/v1/escrow/transactions?type=sales&categoryId="+foodID, seller, txMsg)
	expectPagination(t, "sales food", pg, 2, 1, true, nil, nil)
	if sorted(tokensOf(rows)) != sorted(foodTokens) {
		t.Fatalf("food sales %v", tokensOf(rows))
	}
	rows, pg = h.escrowPage("/v1/escrow/transactions?type=sales", seller, txMsg) // default limit 10
	expectPagination(t, "all sales", pg, 6, 1, true, nil, nil)
	if sorted(tokensOf(rows)) != sorted(allTokens) {
		t.Fatalf("all sales %v", tokensOf(rows))
	}
	rows, pg = h.escrowPage("/v1/escrow/transactions?type=sales&limit=4&page=9", seller, txMsg) // past the end
	expectPagination(t, "past the end", pg, 6, 2, true, nil, 2.0)
	if len(rows) != 0 {
		t.Fatalf("rows past the end %v", rows)
	}
	rows, _ = h.escrowPage("/v1/escrow/transactions?type=sales&categoryId="+elecID, "", txMsg) // the merchant's own
	if fmt.Sprint(tokensOf(rows)) != fmt.Sprint([]string{ownToken}) {
		t.Fatalf("merchant's own sales %v", tokensOf(rows))
	}
	_, pg = h.escrowPage("/v1/escrow/transactions?type=sales&categoryId=nope", seller, txMsg)
	expectPagination(t, "unknown category", pg, 0, 1, true, nil, nil)

	// A purchase in Electronics: the buyer's side and status filters.
	h.pay(buyer, "l-1", 1025, h.viewEscrow(elecTokens[1], "")["id"]).expect(t, 200, "")
	rows, _ = h.escrowPage("/v1/escrow/transactions?type=buy&categoryId="+elecID, buyer, txMsg)
	if fmt.Sprint(tokensOf(rows)) != fmt.Sprint([]string{elecTokens[1]}) {
		t.Fatalf("buys in electronics %v", tokensOf(rows))
	}
	_, pg = h.escrowPage("/v1/escrow/transactions?type=buy&categoryId="+foodID, buyer, txMsg)
	expectPagination(t, "buys in food", pg, 0, 1, true, nil, nil)
	_, pg = h.escrowPage("/v1/escrow/transactions?type=sales&status=ONGOING&categoryId="+elecID, seller, txMsg)
	expectPagination(t, "ongoing sales", pg, 1, 1, true, nil, nil)
	_, pg = h.escrowPage("/v1/escrow/transactions?type=sales&status=pending&categoryId="+elecID, seller, txMsg)
	expectPagination(t, "pending sales", pg, 2, 1, true, nil, nil)

	// feeds: merchant-wide, with status, categoryId, paymentToken and paging.
	const feedMsg = "Escrows fetched successfully"
	_, pg = h.escrowPage("/v1/escrow/feeds", "", feedMsg)
	expectPagination(t, "feeds", pg, 7, 1, true, nil, nil)
	rows, pg = h.escrowPage("/v1/escrow/feeds?status=ongoing", "", feedMsg)
	expectPagination(t, "feeds ongoing", pg, 1, 1, true, nil, nil)
	if rows[0]["paymentToken"] != elecTokens[1] || rows[0]["status"] != "ONGOING" {
		t.Fatalf("ongoing feed %v", rows[0])
	}
	_, pg = h.escrowPage("/v1/escrow/feeds?status=PENDING", "", feedMsg)
	expectPagination(t, "feeds pending", pg, 6, 1, true, nil, nil)
	_, pg = h.escrowPage("/v1/escrow/feeds?status=completed", "", feedMsg)
	expectPagination(t, "feeds completed", pg, 0, 1, true, nil, nil)
	rows, pg = h.escrowPage("/v1/escrow/feeds?categoryId="+elecID, "", feedMsg)
	expectPagination(t, "feeds electronics", pg, 4, 1, true, nil, nil)
	if sorted(tokensOf(rows)) != sorted(append([]string{ownToken}, elecTokens...)) {
		t.Fatalf("feeds electronics %v", tokensOf(rows))
	}
	_, pg = h.escrowPage("/v1/escrow/feeds?status=pending&categoryId="+elecID, "", feedMsg)
	expectPagination(t, "feeds pending electronics", pg, 3, 1, true, nil, nil)
	rows, pg = h.escrowPage("/v1/escrow/feeds?paymentToken="+foodTokens[1], "", feedMsg)
	expectPagination(t, "feeds token", pg, 1, 1, true, nil, nil)
	if rows[0]["paymentToken"] != foodTokens[1] {
		t.Fatalf("feeds token %v", rows[0])
	}
	_, pg = h.escrowPage("/v1/escrow/feeds?paymentToken="+foodTokens[1]+"&categoryId="+elecID, "", feedMsg)
	expectPagination(t, "feeds token outside category", pg, 0, 1, true, nil, nil)
	_, pg = h.escrowPage("/v1/escrow/feeds?paymentToken=PT_NOPE", "", feedMsg)
	expectPagination(t, "feeds unknown token", pg, 0, 1, true, nil, nil)
	var paged []string
	for page, want := range []struct {
		rows       int
		last       bool
		next, prev any
	}{{3, false, 2.0, nil}, {3, false, 3.0, 1.0}, {1, true, nil, 2.0}} {
		rows, pg := h.escrowPage(fmt.Sprintf("/v1/escrow/feeds?limit=3&page=%d", page+1), "", feedMsg)
		expectPagination(t, fmt.Sprintf("feeds page %d", page+1), pg, 7, 3, want.last, want.next, want.prev)
		if len(rows) != want.rows {
			t.Fatalf("feeds page %d: %d rows", page+1, len(rows))
		}
		paged = append(paged, tokensOf(rows)...)
	}
	if sorted(paged) != sorted(append([]string{ownToken}, allTokens...)) {
		t.Fatalf("feeds pages %v", paged)
	}
	// Another merchant sees none of them.
	r := h.do(req{path: "/v1/escrow/feeds?categoryId=" + elecID, key: key(other, domain.Test, merchant.Standard)}).expect(t, 200, feedMsg).obj()
	if r["pagination"].(map[string]any)["count"] != 0.0 {
		t.Fatalf("other merchant's feeds %v", r)
	}
}
