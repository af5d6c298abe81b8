package app

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/internal/gateway"
)

// Reconciliation settles what the provider settled and whose event never
// came (once, however often it runs), and reports every other difference:
// a payout nobody here made, another amount, an outcome here that is not
// the provider's, an accepted withdrawal the provider does not list.
func TestReconcilePayouts(t *testing.T) {
	ctx := context.Background()
	a, _, actor, cid, rail, _, healed := acceptedWithdrawal(t, "wd-heal") // 1,000 + 50
	withdraw := func(ref string) ledger.Record {
		t.Helper()
		in := IntentRequest{Reference: ref, Type: ledger.Withdrawal, Amount: money.Naira(500), Withdrawal: healed.WithdrawalDetails}
		if _, err := a.CreateIntent(ctx, actor, cid, allowed, in); err != nil {
			t.Fatal(err)
		}
		rec, _, err := a.Verify(ctx, actor, cid, allowed, ref)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	agrees, _, contra, amount := withdraw("wd-agrees"), withdraw("wd-unlisted"), withdraw("wd-contra"), withdraw("wd-amount")
	rail.set(contra.ID, payment.PayoutAnswer{Status: payment.ProviderSucceeded})
	if _, err := a.SettleProviderPayout(ctx, actor.Environment, rail.Reference(contra), "provider-events"); err != nil {
		t.Fatal(err)
	}
	rail.set(healed.ID, payment.PayoutAnswer{Status: payment.ProviderFailed, Reason: "Could not credit account"})
	expectMain(t, a, cid, money.Naira(5000-1050-4*550))
	listed := []gateway.ProviderTransfer{
		{Reference: rail.Reference(healed), Amount: healed.Amount, Answer: payment.PayoutAnswer{Status: payment.ProviderFailed}},
		{Reference: rail.Reference(agrees), Amount: agrees.Amount, Answer: payment.PayoutAnswer{Status: payment.ProviderPending}},
		{Reference: rail.Reference(contra), Amount: contra.Amount, Answer: payment.PayoutAnswer{Status: payment.ProviderFailed}},
		{Reference: rail.Reference(amount), Amount: amount.Amount - 1, Answer: payment.PayoutAnswer{Status: payment.ProviderPending}},
		{Reference: "wd_nobody", Amount: money.Naira(70), Answer: payment.PayoutAnswer{Status: payment.ProviderSucceeded}},
	}
	ours := func() []ledger.Record {
		var out []ledger.Record
		for _, ref := range []string{"wd-heal", "wd-agrees", "wd-unlisted", "wd-contra", "wd-amount"} {
			out = append(out, recordOf(t, a, actor, ref).Record)
		}
		return out
	}
	wantDiffs := []string{"amount differs wd-amount", "missing here ", "missing there wd-unlisted", "status differs wd-contra"}
	for round, wantHealed := range [][]string{{"status differs wd-heal"}, nil} {
		got, err := a.ReconcilePayouts(ctx, actor.Environment, listed, ours())
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(kinds(got.Healed)) != fmt.Sprint(wantHealed) || fmt.Sprint(kinds(got.Differences)) != fmt.Sprint(wantDiffs) || got.Compared != 6 {
			t.Fatalf("round %d: compared %d, healed %v, differences %v", round, got.Compared, got.Healed, got.Differences)
		}
		expectMain(t, a, cid, money.Naira(5000-4*550)) // the healed one's debit returned, once
	}
	if st := recordOf(t, a, actor, "wd-heal"); st.Record.Status != ledger.Failed {
		t.Fatalf("healed withdrawal %s", st.Record.Status)
	}
}

func kinds(ds []PayoutDifference) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Kind+" "+d.Reference)
	}
	sort.Strings(out)
	return out
}
