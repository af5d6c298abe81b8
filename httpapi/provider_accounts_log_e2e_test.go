package httpapi

import (
	"strings"
	"testing"
)

// TestProviderAccountNumbersStayOutOfTheLog: on Paystack rails a
// customer's dedicated account (which links deposits to them) and the bank
// account of a payout (whose provider recipient is kept) name streams;
// neither number is in the stored log, in stream names or in data, while
// a transfer into the dedicated account is still credited to its holder.
func TestProviderAccountNumbersStayOutOfTheLog(t *testing.T) {
	t.Run("postgres", testProviderAccountNumbers)
	t.Run("kurrent", func(t *testing.T) { runOnKurrent(t, testProviderAccountNumbers) })
}

func testProviderAccountNumbers(t *testing.T) {
	h := newHarness(t)
	sim, _ := collectThroughSim(h)
	cid := h.createCustomer(h.sa(), "numbers@x.com", "08031119301")
	rec := h.intent(cid, map[string]any{"amount": 5000, "reference": "dva-log", "transactionType": "deposit"}).expect(t, 201, "").obj()
	dedicated, _ := rec["depositAccount"].(map[string]any)["accountNumber"].(string)
	if dedicated == "" {
		t.Fatalf("deposit intent %v", rec)
	}
	if _, err := sim.PayIntoDedicatedAccount(dedicated, 500000); err != nil {
		t.Fatal(err)
	}
	h.settleEvents(sim)
	h.expectWallet(cid, 5000, 0)
	payee := nuban(t, "058", "41", false)
	h.intent(cid, bankWithdrawal("wd-log", 1500, payee)).expect(t, 201, "Payment intent created successfully")
	h.verify(cid, "wd-log").expect(t, 200, "")
	if n := len(sim.Transfers()); n != 1 {
		t.Fatalf("%d transfers at the provider, want the payout's", n)
	}
	h.caughtUp()

	log, _ := storedLog(t, h)
	for _, kind := range []string{"accountlink-", "recipient-"} {
		if !strings.Contains(log.String(), kind) {
			t.Fatalf("no %s stream in the log", kind)
		}
	}
	for _, number := range []string{dedicated, payee} {
		if i := strings.Index(log.String(), number); i >= 0 {
			t.Errorf("the log holds %s: …%s…", number, log.String()[max(0, i-120):min(log.Len(), i+40)])
		}
	}
}
