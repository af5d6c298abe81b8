package httpapi

import (
	"context"
	"encoding/json"
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/internal/app"
)

// Read fence tests: writes answer from their own events without waiting for
// the read models; every read waits until the read models include every
// write acknowledged before it (Server.readModels).

const msgReadBusy = "The service is busy; retry shortly"

// TestWritesDoNotWaitForReadModels: with the projectors stopped, the escrow
// lifecycle and a top-up still answer in full; reads answer 503 rather than
// stale data, and so does a write that must read a read model before it
// appends (it appends nothing). Once the projectors run again every read
// shows every write.
func TestWritesDoNotWaitForReadModels(t *testing.T) {
	h := startHarnessWith(t, harnessOptions{waitTimeout: 300 * time.Millisecond}, nil)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035550001")
	buyer := h.funded("b@x.com", "08035550002", 20000)
	cat := h.do(req{method: "POST", path: "/v1/escrow/category/create", key: h.sa(),
		body: map[string]any{"name": "Phones", "description": "Used phones"}}).expect(t, 201, "Category created successfully").obj()

	h.projecting.stop()
	e := h.createEscrow(seller, map[string]string{"amount": "10000", "purpose": "Phone", "whoPays": "buyer",
		"categoryId": cat["id"].(string)}, 1).expect(t, 201, "Escrow created successfully").obj()
	if e["status"] != "PENDING" || !reflect.DeepEqual(e["category"], withoutPosition(cat)) {
		t.Fatalf("created escrow %v, want PENDING in category %v", e, cat)
	}
	id, token := e["id"].(string), e["paymentToken"].(string)
	paid := h.pay(buyer, "fence-1", 10250, id).expect(t, 200, "Payment successful").obj()
	if paid["status"] != "success" || paid["escrows"].([]any)[0].(map[string]any)["status"] != "ONGOING" {
		t.Fatalf("paid %v", paid)
	}
	done := h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + id, key: h.std(), cid: buyer}).
		expect(t, 200, "Payment confirmed successfully").obj()
	if done["status"] != "COMPLETED" || !reflect.DeepEqual(done["category"], withoutPosition(cat)) {
		t.Fatalf("confirmed escrow %v", done)
	}
	h.topUp(seller, 1500).expect(t, 200, "Wallet topped up successfully")

	for _, r := range []req{
		{path: "/v1/wallet", key: h.std(), cid: buyer},
		{path: "/v1/merchant/balance", key: h.sa()},
		{path: "/v1/escrow/transactions?type=sales", key: h.std(), cid: seller},
		{path: "/v1/escrow/verify/" + token, key: h.std()},
		{path: "/v1/payment/history", key: h.std(), cid: buyer},
	} {
		h.do(r).expect(t, 503, msgReadBusy)
	}
	before := h.events()
	h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + token, key: h.sa(), body: map[string]any{"additionalFee": 100}}).
		expect(t, 503, msgReadBusy)
	if after := h.events(); after != before {
		t.Fatalf("a write refused before its append wrote %d events", after-before)
	}

	h.projecting.start()
	h.caughtUp() // the reads' own wait is short here (waitTimeout)
	h.expectWallet(buyer, 9750, 0)
	h.expectWallet(seller, 11500, 0)
	h.expectMerchant(125, 0)
	if got := h.viewEscrow(token, ""); got["status"] != "COMPLETED" {
		t.Fatalf("escrow after the projectors caught up: %v", got)
	}
	h.assertZeroSum()
}

// TestReadWaitsForWritesMadeElsewhere: a write acknowledged by another
// writer on the same database (here the application service itself, as
// another instance would) is seen by the next read through this server,
// which waits for the projectors rather than answer without it.
func TestReadWaitsForWritesMadeElsewhere(t *testing.T) {
	h := newHarness(t)
	buyer := h.createCustomer(h.sa(), "b@x.com", "08035550002")
	h.expectWallet(buyer, 0, 0)
	h.projecting.stop()
	a := app.Actor{MerchantID: h.m.MerchantID, Environment: domain.Test, KeyID: "elsewhere"}
	if _, _, err := h.svc.TopUp(context.Background(), a, buyer, money.Naira(2000)); err != nil {
		t.Fatal(err)
	}
	answered := make(chan resp, 1)
	go func() { answered <- h.do(req{path: "/v1/wallet", key: h.std(), cid: buyer}) }()
	select {
	case r := <-answered:
		t.Fatalf("the read answered before the read models had the top-up: %d %s", r.Status, r.Raw)
	case <-time.After(300 * time.Millisecond):
	}
	h.projecting.start()
	r := (<-answered).expect(t, 200, "Wallet fetched successfully")
	if main, _ := h.balances(r); main != money.Naira(2000) {
		t.Fatalf("wallet %s after the top-up made elsewhere, want 2000", main)
	}
}

// TestEscrowCategoryAsTheCategoryReadShowsIt: an escrow's category, read
// from the event store in write answers, is the category record the
// category routes read from the read model, to the microsecond, after an
// edit too.
func TestEscrowCategoryAsTheCategoryReadShowsIt(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035550001")
	cat := h.do(req{method: "POST", path: "/v1/escrow/category/create", key: h.sa(),
		body: map[string]any{"name": "Phones", "description": "Used phones"}}).expect(t, 201, "Category created successfully")
	catID := cat.obj()["id"].(string)
	read := func() json.RawMessage {
		t.Helper()
		r := h.do(req{path: "/v1/escrow/category/get/" + catID, key: h.sa()}).expect(t, 200, "Category fetched successfully")
		// position is the category's place in listings, which an
		// escrow's copy does not carry.
		return regexp.MustCompile(`,"position":\d+`).ReplaceAll(dataOf(t, r), nil)
	}
	e := h.createEscrow(seller, map[string]string{"amount": "10000", "purpose": "Phone", "whoPays": "buyer", "categoryId": catID}, 0).
		expect(t, 201, "Escrow created successfully")
	if got, want := categoryOf(t, e), read(); string(got) != string(want) {
		t.Fatalf("escrow category %s, category read %s", got, want)
	}
	h.do(req{method: "PUT", path: "/v1/escrow/category/edit/" + catID, key: h.sa(), body: map[string]any{"name": "Tablets"}}).
		expect(t, 200, "Category updated successfully")
	token := e.obj()["paymentToken"].(string)
	edited := h.do(req{method: "PUT", path: "/v1/escrow/edit/" + token, key: h.std(), cid: seller,
		body: map[string]any{"purpose": "Tablet"}}).expect(t, 200, "Escrow updated successfully")
	if got, want := categoryOf(t, edited), read(); string(got) != string(want) || !json.Valid(got) {
		t.Fatalf("edited escrow category %s, category read %s", got, want)
	}
}

func dataOf(t *testing.T, r resp) json.RawMessage {
	t.Helper()
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(r.Raw, &env); err != nil {
		t.Fatalf("%v: %s", err, r.Raw)
	}
	return env.Data
}

func categoryOf(t *testing.T, r resp) json.RawMessage {
	t.Helper()
	var d struct {
		Category json.RawMessage `json:"category"`
	}
	if err := json.Unmarshal(dataOf(t, r), &d); err != nil || len(d.Category) == 0 || string(d.Category) == "null" {
		t.Fatalf("no category (%v): %s", err, r.Raw)
	}
	return d.Category
}
