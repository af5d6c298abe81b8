package httpapi

import (
	"context"
	"fmt"
	"testing"

	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/internal/app"
)

// Deposit intents awaiting a transfer into a dedicated account are
// bounded: at most payment.MaxAwaitedDeposits at once per account (the
// next is refused, nothing staged), each awaited for
// payment.AwaitedDepositLifetime. A transfer after that is credited as a
// deposit of its own, a lapsed intent fails when verified, and the lapsed
// entries are dropped from the account's state by that verify or the next
// deposit intent.
func TestAwaitedDepositsLapseAndAreCapped(t *testing.T) {
	h := newHarness(t)
	clock := h.useFakeClock()
	sim, _ := collectThroughSim(h)
	cid := h.createCustomer(h.sa(), "lapse@x.com", "08031119301")

	var number string
	for i := range payment.MaxAwaitedDeposits {
		rec := h.intent(cid, map[string]any{"amount": 1000 + i, "reference": fmt.Sprintf("lapse-%d", i), "transactionType": "deposit"}).expect(t, 201, "").obj()
		number = rec["depositAccount"].(map[string]any)["accountNumber"].(string)
	}
	h.intent(cid, map[string]any{"amount": 5000, "reference": "lapse-over", "transactionType": "deposit"}).
		expect(t, 400, payment.ErrTooManyAwaited.Error())
	if got := h.paymentEventTypes("lapse-over"); len(got) != 0 {
		t.Fatalf("a refused intent was staged: %v", got)
	}

	// Past the lifetime, a transfer of the first intent's amount is a
	// deposit of its own: credited, and the intent, verified, fails.
	clock.Advance(payment.AwaitedDepositLifetime)
	late, err := sim.PayIntoDedicatedAccount(number, 100000)
	if err != nil {
		t.Fatal(err)
	}
	h.settleEvents(sim)
	h.expectWallet(cid, 1000, 0)
	if got := h.verify(cid, "lapse-0").expect(t, 200, "").obj(); got["status"] != "failed" {
		t.Fatalf("a lapsed intent verified: %v", got)
	}
	h.expectWallet(cid, 1000, 0)
	if got := h.chargeEvents(late); got["charge.applied"] != 1 {
		t.Fatalf("events of the late transfer %v", got)
	}

	// The next intent drops every lapsed entry and is awaited alone.
	h.intent(cid, map[string]any{"amount": 5000, "reference": "lapse-next", "transactionType": "deposit"}).expect(t, 201, "")
	evs, err := h.store.ReadStream(context.Background(), app.DepositAccountKind.StreamName(cid), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var s payment.DepositAccount
	lapsed := 0
	for _, e := range evs {
		ev, err := payment.DepositAccountRegistry.Decode(e.Type, e.Data)
		if err != nil {
			t.Fatal(err)
		}
		s = payment.ApplyDepositAccount(s, ev)
		if _, ok := ev.(payment.DepositLapsed); ok {
			lapsed++
		}
	}
	if lapsed != payment.MaxAwaitedDeposits || len(s.Awaited) != 1 || s.Awaited[0].Reference != "lapse-next" {
		t.Fatalf("%d lapsed, awaited %+v", lapsed, s.Awaited)
	}
	if _, err := sim.PayIntoDedicatedAccount(number, 500000); err != nil {
		t.Fatal(err)
	}
	h.settleEvents(sim)
	if got := h.verify(cid, "lapse-next").expect(t, 200, "").obj(); got["status"] != "success" {
		t.Fatalf("the live intent after its transfer: %v", got)
	}
	h.expectWallet(cid, 6000, 0)
	h.auditClean()
}
