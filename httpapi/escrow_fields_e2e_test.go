package httpapi

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// jsonKind checks one field of an escrow against the spec's Escrow table.
type jsonKind func(v any) bool

var (
	isString  jsonKind = func(v any) bool { _, ok := v.(string); return ok }
	isBool    jsonKind = func(v any) bool { _, ok := v.(bool); return ok }
	isNull    jsonKind = func(v any) bool { return v == nil }
	isInteger jsonKind = func(v any) bool { f, ok := v.(float64); return ok && f == float64(int64(f)) }
	isObject  jsonKind = func(v any) bool { _, ok := v.(map[string]any); return ok }
	isStrings jsonKind = func(v any) bool {
		a, ok := v.([]any)
		for _, e := range a {
			if _, s := e.(string); !s {
				return false
			}
		}
		return ok
	}
	isEmptyArray jsonKind = func(v any) bool { a, ok := v.([]any); return ok && len(a) == 0 }
	// isUnixString is the spec's "Unix timestamp in seconds, as a string",
	// within a minute of now.
	isUnixString jsonKind = func(v any) bool {
		s, ok := v.(string)
		if !ok || !regexp.MustCompile(`^[0-9]+$`).MatchString(s) {
			return false
		}
		n, _ := strconv.ParseInt(s, 10, 64)
		d := time.Now().Unix() - n
		return d > -60 && d < 60
	}
	// isISO is ISO 8601 UTC.
	isISO jsonKind = func(v any) bool {
		s, ok := v.(string)
		if !ok || !strings.HasSuffix(s, "Z") {
			return false
		}
		_, err := time.Parse(time.RFC3339Nano, s)
		return err == nil
	}
)

func oneOf(kinds ...jsonKind) jsonKind {
	return func(v any) bool {
		for _, k := range kinds {
			if k(v) {
				return true
			}
		}
		return false
	}
}

// expectEscrowFields checks that e has every field of the spec's Escrow
// table (split only after a split resolution) with its JSON type; over
// overrides the default check of some fields for the escrow's stage.
func expectEscrowFields(t *testing.T, what string, e map[string]any, over map[string]jsonKind) {
	t.Helper()
	nullable := func(k jsonKind) jsonKind { return oneOf(k, isNull) }
	want := map[string]jsonKind{
		"id": isString, "amount": isInteger, "purpose": isString, "description": isString, "whoPays": isString,
		"imageUrl": isStrings, "fee": isInteger, "additionalFee": isInteger, "additionalFeeRefundable": isBool,
		"paymentToken": isString, "paidAt": isNull, "status": isString, "state": isString, "channel": isString,
		"isSeller": isBool, "dispute": nullable(isEmptyArray), "category": nullable(isObject), "completedAt": isNull,
		"maxDelivery": isInteger, "deliveryTimeline": isString, "totalQuantity": isInteger, "settlementType": isString,
		"milestones": isEmptyArray, "participants": isNull, "winnerId": isNull, "createdAt": isISO, "updatedAt": isISO,
		"sellerId": isString, "buyerId": isNull, "logs": isStrings, "approvedClaimBy": isNull, "refundedBy": isNull,
		"paymentId": isNull, "deliveryDetails": isNull, "merchantId": isString, "environment": isString, "isMerchant": isBool,
	}
	for k, v := range over {
		want[k] = v
	}
	for field, ok := range want {
		v, present := e[field]
		if !present {
			t.Errorf("%s: field %s missing", what, field)
			continue
		}
		if !ok(v) {
			t.Errorf("%s: field %s = %#v has the wrong type or format", what, field, v)
		}
	}
	if _, ok := e["split"]; ok {
		t.Errorf("%s: split before any split resolution: %v", what, e["split"])
	}
	if t.Failed() {
		t.Fatalf("%s: %v", what, e)
	}
}

func TestEscrowFullFieldSet(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035555001")
	buyer := h.funded("b@x.com", "08035555002", 5000)
	cat := categoryClient{h: h, key: h.std()}.create(catBody("Phones")).expect(t, 201, catCreated).obj()

	e := h.createEscrow(seller, map[string]string{"amount": "2000", "purpose": "Phone", "description": "Used", "whoPays": "buyer",
		"maxDelivery": "2", "deliveryTimeline": "hours", "categoryId": cat["id"].(string)}, 1).expect(t, 201, "Escrow created successfully").obj()
	expectEscrowFields(t, "create", e, map[string]jsonKind{"category": isObject})
	if e["amount"] != 2000.0 || e["purpose"] != "Phone" || e["description"] != "Used" || e["whoPays"] != "buyer" || e["fee"] != 50.0 ||
		e["additionalFee"] != 0.0 || e["additionalFeeRefundable"] != true || e["status"] != "PENDING" || e["state"] != "AWAITING_PAYMENT" ||
		e["isSeller"] != true || e["maxDelivery"] != 2.0 || e["deliveryTimeline"] != "hours" || e["totalQuantity"] != 1.0 ||
		e["settlementType"] != "STANDARD" || e["sellerId"] != seller || fmt.Sprint(e["logs"]) != "[PENDING]" ||
		e["merchantId"] != h.m.MerchantID || e["environment"] != "test" || e["isMerchant"] != false || e["channel"] == "" ||
		len(e["imageUrl"].([]any)) != 1 || e["createdAt"] != e["updatedAt"] {
		t.Fatalf("created escrow %v", e)
	}
	token, id := e["paymentToken"].(string), e["id"].(string)

	// verify as the buyer before paying: the same fields, isSeller false.
	v := h.viewEscrow(token, buyer)
	expectEscrowFields(t, "verify unpaid", v, map[string]jsonKind{"category": isObject})
	if v["isSeller"] != false || v["id"] != id || fmt.Sprint(v["category"]) != fmt.Sprint(withoutPosition(cat)) {
		t.Fatalf("verify %v", v)
	}

	// Paid: paidAt is Unix seconds as a string; buyer and payment known.
	h.pay(buyer, "f-1", 2050, id).expect(t, 200, "")
	v = h.viewEscrow(token, buyer)
	expectEscrowFields(t, "verify paid", v, map[string]jsonKind{"category": isObject, "paidAt": isUnixString,
		"buyerId": isString, "paymentId": isString})
	if v["buyerId"] != buyer || v["status"] != "ONGOING" || v["state"] != "OPENED" {
		t.Fatalf("verify paid %v", v)
	}

	// Completed: completedAt is set (ISO 8601 UTC), paidAt unchanged.
	paidAt := v["paidAt"]
	done := h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + id, key: h.std(), cid: buyer}).expect(t, 200, "").obj()
	expectEscrowFields(t, "confirm", done, map[string]jsonKind{"category": isObject, "paidAt": isUnixString,
		"buyerId": isString, "paymentId": isString, "completedAt": isISO})
	v = h.viewEscrow(token, "")
	expectEscrowFields(t, "verify completed", v, map[string]jsonKind{"category": isObject, "paidAt": isUnixString,
		"buyerId": isString, "paymentId": isString, "completedAt": isISO})
	if v["paidAt"] != paidAt || v["status"] != "COMPLETED" || v["state"] != "CLOSED" || v["isSeller"] != false {
		t.Fatalf("verify completed %v", v)
	}

	// The merchant's own sale: no seller, isMerchant true, no category.
	own := h.do(req{method: "POST", path: "/v1/escrow/create", key: h.std(), body: map[string]any{"amount": 1000, "purpose": "x", "whoPays": "buyer"}}).
		expect(t, 201, "").obj()
	expectEscrowFields(t, "merchant's own", own, map[string]jsonKind{"sellerId": isNull})
	if own["isMerchant"] != true || own["category"] != nil {
		t.Fatalf("merchant's own %v", own)
	}
}

func TestEscrowEditImagesAppend(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035556001")
	stored := func() int {
		t.Helper()
		return len(h.storedFiles(""))
	}
	e := h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer"}, 2).expect(t, 201, "").obj()
	token := e["paymentToken"].(string)
	originals := e["imageUrl"].([]any)
	if len(originals) != 2 || originals[0] == originals[1] {
		t.Fatalf("created images %v", originals)
	}
	edit := func(images int) resp {
		t.Helper()
		body, ct := escrowForm(t, map[string]string{"purpose": "y"}, images)
		return h.do(req{method: "PUT", path: "/v1/escrow/edit/" + token, key: h.std(), cid: seller, body: body,
			headers: map[string]string{"Content-Type": ct}})
	}
	ed := edit(1).expect(t, 200, "Escrow updated successfully").obj()
	imgs := ed["imageUrl"].([]any)
	if len(imgs) != 3 || imgs[0] != originals[0] || imgs[1] != originals[1] || imgs[2] == originals[0] || imgs[2] == originals[1] || ed["purpose"] != "y" {
		t.Fatalf("edited images %v, originals %v", imgs, originals)
	}
	for _, u := range imgs {
		res, err := http.Get(u.(string))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "image/png" {
			t.Fatalf("image %s: %d %s", u, res.StatusCode, res.Header.Get("Content-Type"))
		}
	}
	if v := h.viewEscrow(token, seller); fmt.Sprint(v["imageUrl"]) != fmt.Sprint(imgs) {
		t.Fatalf("verify images %v, want %v", v["imageUrl"], imgs)
	}

	// The total is capped at 20: 3 + 18 is refused, stores nothing and
	// keeps the images; 3 + 17 fits; then one more is refused.
	files := stored()
	if files < 3 {
		t.Fatalf("%d files stored, want at least 3", files)
	}
	edit(18).expect(t, 400, "imageUrl accepts at most 20 images in total")
	if n := stored(); n != files {
		t.Fatalf("refused edit left %d files, had %d", n, files)
	}
	if v := h.viewEscrow(token, seller); fmt.Sprint(v["imageUrl"]) != fmt.Sprint(imgs) {
		t.Fatalf("images after refused edit %v", v["imageUrl"])
	}
	edit(21).expect(t, 400, "imageUrl accepts at most 20 images")
	full := edit(17).expect(t, 200, "Escrow updated successfully").obj()["imageUrl"].([]any)
	if len(full) != 20 || fmt.Sprint(full[:3]) != fmt.Sprint(imgs) {
		t.Fatalf("20 images %v", full)
	}
	edit(1).expect(t, 400, "imageUrl accepts at most 20 images in total")
	if v := h.viewEscrow(token, seller); len(v["imageUrl"].([]any)) != 20 {
		t.Fatalf("images after refused edit %v", v["imageUrl"])
	}
}

func TestEscrowMerchantDeletesOwnSale(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035557001")
	own := h.do(req{method: "POST", path: "/v1/escrow/create", key: h.std(), body: map[string]any{"amount": 1000, "purpose": "x", "whoPays": "buyer"}}).
		expect(t, 201, "").obj()
	ownToken := own["paymentToken"].(string)
	sale := h.createEscrow(seller, map[string]string{"amount": "1000", "purpose": "x", "whoPays": "buyer"}, 0).expect(t, 201, "").obj()
	saleToken := sale["paymentToken"].(string)

	// A customer cannot delete the merchant's sale, nor the merchant a customer's.
	h.do(req{method: "DELETE", path: "/v1/escrow/delete/" + ownToken, key: h.std(), cid: seller}).expect(t, 400, "Action not allowed")
	h.do(req{method: "DELETE", path: "/v1/escrow/delete/" + saleToken, key: h.std()}).expect(t, 400, "Action not allowed")
	// Without customer-id the merchant deletes its own sale.
	r := h.do(req{method: "DELETE", path: "/v1/escrow/delete/" + ownToken, key: h.std()}).expect(t, 200, "Escrow deleted successfully")
	if d, ok := r.Data.(map[string]any); !ok || len(d) != 0 {
		t.Fatalf("delete data %s", r.Raw)
	}
	h.do(req{path: "/v1/escrow/verify/" + ownToken, key: h.std()}).expect(t, 400, "Escrow not found")
	h.do(req{method: "DELETE", path: "/v1/escrow/delete/" + ownToken, key: h.std()}).expect(t, 400, "Escrow not found")
	rows, _ := h.escrowPage("/v1/escrow/feeds", "", "Escrows fetched successfully")
	if fmt.Sprint(tokensOf(rows)) != fmt.Sprint([]string{saleToken}) {
		t.Fatalf("feeds after delete %v", tokensOf(rows))
	}
	h.viewEscrow(saleToken, "")
}
