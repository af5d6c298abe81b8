package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"testing"
)

// TestCategoriesMultipartAndPosition: a category
// created by multipart with an image and a position, moved to position 1
// with PUT /v1/escrow/category/position/{id}; the others renumber and
// listings follow the positions.
func TestCategoriesMultipartAndPosition(t *testing.T) {
	h := newHarness(t)
	create := func(name string, images int, extra ...string) resp {
		t.Helper()
		fields := map[string]string{"name": name, "description": "about " + name}
		for i := 0; i+1 < len(extra); i += 2 {
			fields[extra[i]] = extra[i+1]
		}
		body, ct := escrowForm(t, fields, images)
		return h.do(req{method: "POST", path: "/v1/escrow/category/create", key: h.sa(), body: body,
			headers: map[string]string{"Content-Type": ct}})
	}
	order := func() []string {
		t.Helper()
		r := h.do(req{path: "/v1/escrow/category/get?limit=100", key: h.std()}).expect(t, 200, "Categories fetched successfully")
		var names []string
		for i, raw := range r.obj()["data"].([]any) {
			c := raw.(map[string]any)
			if c["position"] != float64(i+1) {
				t.Fatalf("listing row %d has position %v: %s", i, c["position"], r.Raw)
			}
			names = append(names, c["name"].(string))
		}
		return names
	}
	// JSON still works; a new category goes to the top by default.
	h.do(req{method: "POST", path: "/v1/escrow/category/create", key: h.sa(), body: map[string]any{"name": "Books"}}).expect(t, 201, "")
	create("Shoes", 0).expect(t, 201, "Category created successfully")
	if got := fmt.Sprint(order()); got != "[Shoes Books]" {
		t.Fatalf("order %s", got)
	}
	// Multipart with an image, placed last.
	phones := create("Phones", 1, "category_position", "3").expect(t, 201, "Category created successfully").obj()
	if phones["position"] != 3.0 || phones["description"] != "about Phones" {
		t.Fatalf("created %v", phones)
	}
	img, err := http.Get(phones["imageUrl"].(string))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(img.Body)
	img.Body.Close()
	if img.StatusCode != 200 || img.Header.Get("Content-Type") != "image/png" || len(b) == 0 {
		t.Fatalf("image %d %s", img.StatusCode, img.Header.Get("Content-Type"))
	}
	if got := fmt.Sprint(order()); got != "[Shoes Books Phones]" {
		t.Fatalf("order %s", got)
	}
	// Moved to position 1: the others renumber.
	id := phones["id"].(string)
	moved := h.do(req{method: "PUT", path: "/v1/escrow/category/position/" + id, key: h.std(), body: map[string]any{"newPosition": 1}}).
		expect(t, 200, "Category position updated successfully").obj()
	if moved["position"] != 1.0 || moved["id"] != id {
		t.Fatalf("moved %v", moved)
	}
	if got := fmt.Sprint(order()); got != "[Phones Shoes Books]" {
		t.Fatalf("order after the move %s", got)
	}
	// The same move again changes nothing; a string number is read too.
	h.do(req{method: "PUT", path: "/v1/escrow/category/position/" + id, key: h.std(), body: map[string]any{"newPosition": "1"}}).
		expect(t, 200, "")
	if got := h.do(req{path: "/v1/escrow/category/get/" + id, key: h.std()}).expect(t, 200, "").obj(); got["position"] != 1.0 {
		t.Fatalf("get %v", got)
	}
	// Edit by multipart: a new image and a move in one request.
	body, ct := escrowForm(t, map[string]string{"category_position": "2"}, 1)
	edited := h.do(req{method: "PUT", path: "/v1/escrow/category/edit/" + id, key: h.sa(), body: body,
		headers: map[string]string{"Content-Type": ct}}).expect(t, 200, "Category updated successfully").obj()
	if edited["position"] != 2.0 || edited["imageUrl"] == phones["imageUrl"] || edited["name"] != "Phones" {
		t.Fatalf("edited %v", edited)
	}
	if got := fmt.Sprint(order()); got != "[Shoes Phones Books]" {
		t.Fatalf("order after the edit %s", got)
	}
	// A deleted category leaves no gap.
	shoes := h.do(req{path: "/v1/escrow/category/get?limit=1", key: h.std()}).expect(t, 200, "").obj()["data"].([]any)[0].(map[string]any)
	h.do(req{method: "DELETE", path: "/v1/escrow/category/delete/" + shoes["id"].(string), key: h.sa()}).expect(t, 200, "")
	if got := fmt.Sprint(order()); got != "[Phones Books]" {
		t.Fatalf("order after the delete %s", got)
	}
	// Refusals.
	for _, tc := range []struct {
		body any
		msg  string
	}{
		{map[string]any{}, "newPosition is required"},
		{map[string]any{"newPosition": 0}, "newPosition must be an integer of at least 1"},
		{map[string]any{"newPosition": "first"}, "newPosition must be an integer of at least 1"},
		{map[string]any{"newPosition": 3}, "newPosition must be an integer between 1 and 2"},
	} {
		h.do(req{method: "PUT", path: "/v1/escrow/category/position/" + id, key: h.std(), body: tc.body}).expect(t, 400, tc.msg)
	}
	h.do(req{method: "PUT", path: "/v1/escrow/category/position/" + shoes["id"].(string), key: h.std(),
		body: map[string]any{"newPosition": 1}}).expect(t, 404, "Category not found")
	create("Toys", 0, "category_position", "4").expect(t, 400, "category_position must be an integer between 1 and 3")
	create("Toys", 0, "category_position", "0").expect(t, 400, "category_position must be an integer of at least 1")
	// Another merchant's category cannot be moved.
	other := h.newMerchant(true)
	h.do(req{method: "PUT", path: "/v1/escrow/category/position/" + id, key: key(other, "test", "super_admin"),
		body: map[string]any{"newPosition": 1}}).expect(t, 404, "Category not found")
}

// withoutPosition is a category record as an escrow carries it: position
// is the category's place in listings, which an escrow's copy does not
// carry.
func withoutPosition(c map[string]any) map[string]any {
	out := make(map[string]any, len(c))
	for k, v := range c {
		if k != "position" {
			out[k] = v
		}
	}
	return out
}
