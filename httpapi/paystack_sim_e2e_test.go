package httpapi

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/reference"
	"github.com/escrowd/escrowd/internal/gateway"
	"github.com/escrowd/escrowd/internal/gateway/paystackgw"
	"github.com/escrowd/escrowd/internal/paystack/paystacksim"
)

// unresolvable is a NUBAN of bank 058 with a valid check digit that the
// simulator's bank does not know (its rule: numbers ending in 9999).
func unresolvable(t *testing.T) string {
	for i := 0; i < 1000; i++ {
		serial := fmt.Sprintf("%06d999", i)
		if check, ok := reference.NUBANCheckDigit("058", serial); ok && check == '9' {
			return serial + "9"
		}
	}
	t.Fatal("no unresolvable account number found")
	return ""
}

// TestPayoutsThroughThePaystackSimulator: the test environment on the
// Paystack gateways, over the real HTTP client, against the simulator,
// whose signed events reach the server's /hooks/paystack/test. A bank
// withdrawal stays pending until the transfer settles: success settles it;
// failed, announced twice, returns the debit once; reversed after a
// success returns it; an account the bank cannot resolve is refused before
// any debit.
func TestPayoutsThroughThePaystackSimulator(t *testing.T) {
	h := newHarness(t)
	const key = "sk_test_sim_e2e"
	sim, err := paystacksim.Start(paystacksim.Config{SecretKey: key, WebhookURL: h.srv.URL + "/hooks/paystack/test"})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	if err := sim.AutoSettleTransfers("", 0); err != nil {
		t.Fatal(err)
	}
	set, err := paystackgw.New(paystackgw.Config{SecretKey: key, BaseURL: sim.URL})
	if err != nil {
		t.Fatal(err)
	}
	set.Collection = gateway.TestCollection{} // deposits stay the built-in test gateway's
	h.svc.Gateways[domain.Test] = set
	cid := h.funded("sim@x.com", "08031119101", 10000)

	withdraw := func(ref, account string) string {
		t.Helper()
		h.intent(cid, bankWithdrawal(ref, 1000, account)).expect(t, 201, "")
		rec := h.verify(cid, ref).expect(t, 200, "").obj()
		if rec["status"] != "pending" {
			t.Fatalf("verified withdrawal %v, want pending", rec)
		}
		trs := sim.Transfers()
		return trs[len(trs)-1].Reference
	}
	status := func(ref, want string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			rec := h.verify(cid, ref).expect(t, 200, "").obj()
			if rec["status"] == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("withdrawal %s is %v, want %s", ref, rec["status"], want)
			}
		}
	}

	paid := withdraw("sim-paid", nuban(t, "058", "12", false))
	h.expectWallet(cid, 8950, 0)
	if err := sim.SettleTransfer(paid, "success"); err != nil {
		t.Fatal(err)
	}
	status("sim-paid", "success")
	h.expectWallet(cid, 8950, 0)

	sim.DuplicateEvents(true)
	failed := withdraw("sim-failed", nuban(t, "058", "13", false))
	h.expectWallet(cid, 7900, 0)
	if err := sim.SettleTransfer(failed, "failed"); err != nil {
		t.Fatal(err)
	}
	status("sim-failed", "failed")
	sim.DuplicateEvents(false)
	h.expectWallet(cid, 8950, 0)

	if err := sim.SettleTransfer(paid, "reversed"); err != nil {
		t.Fatal(err)
	}
	status("sim-paid", "reversed")
	h.expectWallet(cid, 10000, 0)

	r := h.intent(cid, bankWithdrawal("sim-unknown", 1000, unresolvable(t)))
	if r.Status != 400 || !strings.Contains(strings.ToLower(r.Message), "account") {
		t.Fatalf("withdrawal to an account the bank does not know: %d %s", r.Status, r.Raw)
	}
	h.expectWallet(cid, 10000, 0)
	if n := len(sim.Transfers()); n != 2 {
		t.Fatalf("%d transfers sent, want 2", n)
	}
	// The outcomes came as the simulator's signed events, each kept once
	// (the failure's second delivery counted on its row).
	var events, deliveries int
	if err := h.pool.QueryRow(t.Context(), `SELECT count(*), coalesce(sum(deliveries), 0) FROM provider_inbox WHERE provider = 'paystack'`).Scan(&events, &deliveries); err != nil {
		t.Fatal(err)
	}
	if events != 3 || deliveries != 4 {
		t.Fatalf("inbox: %d events in %d deliveries, want 3 in 4", events, deliveries)
	}
}
