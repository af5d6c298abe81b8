package chaos

import (
	"context"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/internal/paystack"
	"github.com/escrowd/escrowd/internal/paystack/paystacksim"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// TestCheckerProviderMoney: the provider oracle accepts records that agree
// with the ledger (collections less fees, top-ups, transfers sent, and a
// withdrawal debited but not sent yet) and finds each way they can
// disagree: a fee not posted as a cost, a kobo missing from clearing, a
// failed transfer counted as paid, and an unsent debit forgotten.
func TestCheckerProviderMoney(t *testing.T) {
	pool := pgtest.OpenPool(t, pgtest.NewEmptyURL(t))
	ctx := context.Background()
	// Collections: 150.00 and 50.00 less 2.25 in fees; 30.00 failed. A
	// top-up of 7.00. Transfers: 40.00 sent, 20.00 failed; 10.00 debited and
	// not sent. Clearing = fees - received - top-ups + paid out + unsent.
	if _, err := pool.Exec(ctx, `
		CREATE TABLE rm_balances (environment text, holder text, bucket text, balance bigint);
		CREATE TABLE rm_transactions (id text, merchant_id text, environment text, reference text, status text,
			transaction_type text, record jsonb);
		CREATE TABLE rm_payouts_in_flight (merchant_id text, environment text, reference text);
		INSERT INTO rm_balances VALUES ('test', 'platform', 'cost', -225),
			('test', 'external', 'collections', -20000), ('test', 'external', 'payouts', 4525),
			('live', 'external', 'collections', -99), ('test', 'merchant', 'cost', -1);
		INSERT INTO rm_transactions VALUES
			('t1', 'm', 'test', 'TOPUP-1', 'success', 'topup', '{"amount": "7.00"}'),
			('t2', 'm', 'test', 'TOPUP-2', 'failed', 'topup', '{"amount": "9.00"}'),
			('w1', 'm', 'test', 'wd-1', 'pending', 'withdrawal', '{"amount": "40.00"}'),
			('w2', 'm', 'test', 'wd-2', 'failed', 'withdrawal', '{"amount": "20.00"}'),
			('w3', 'm', 'test', 'wd-3', 'pending', 'withdrawal', '{"amount": "10.00"}');
		INSERT INTO rm_payouts_in_flight VALUES ('m', 'test', 'wd-1'), ('m', 'test', 'wd-3')`); err != nil {
		t.Fatal(err)
	}
	transactions := func() []paystacksim.TransactionRecord {
		return []paystacksim.TransactionRecord{
			{Reference: "c1", Amount: 15000, Fees: 150, Status: paystack.TransactionSuccess},
			{Reference: "c2", Amount: 5000, Fees: 75, Status: paystack.TransactionSuccess},
			{Reference: "c3", Amount: 3000, Status: paystack.TransactionFailed},
		}
	}
	transfers := func() []paystacksim.TransferRecord {
		return []paystacksim.TransferRecord{
			{Reference: paystack.TransferReference("w1"), Amount: 4000, Status: paystack.TransferSuccess},
			{Reference: paystack.TransferReference("w2"), Amount: 2000, Status: paystack.TransferFailed},
		}
	}
	k := &checker{pool: pool, w: &workload{}}
	check := func(t *testing.T, txs []paystacksim.TransactionRecord, trs []paystacksim.TransferRecord, want string) {
		t.Helper()
		v := &verdict{}
		k.providerRecords(ctx, v, txs, trs)
		switch {
		case want == "" && len(v.violations) > 0:
			t.Fatalf("records that agree were refused:\n%s", strings.Join(v.violations, "\n"))
		case want != "" && (len(v.violations) != 1 || !strings.Contains(v.violations[0], want)):
			t.Fatalf("violations %q, want one saying %q", v.violations, want)
		}
	}
	exec := func(t *testing.T, sql string) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("agree", func(t *testing.T) { check(t, transactions(), transfers(), "") })
	t.Run("fee not posted as a cost", func(t *testing.T) {
		exec(t, `UPDATE rm_balances SET balance = -200 WHERE bucket = 'cost' AND holder = 'platform'`)
		defer exec(t, `UPDATE rm_balances SET balance = -225 WHERE bucket = 'cost' AND holder = 'platform'`)
		check(t, transactions(), transfers(), "it kept 2.25 in fees, the processing costs are -2")
	})
	t.Run("a kobo missing from clearing", func(t *testing.T) {
		exec(t, `UPDATE rm_balances SET balance = balance + 1 WHERE bucket = 'payouts'`)
		defer exec(t, `UPDATE rm_balances SET balance = balance - 1 WHERE bucket = 'payouts'`)
		check(t, transactions(), transfers(), "clearing holds")
	})
	t.Run("failed transfer counted as paid", func(t *testing.T) {
		trs := transfers()
		trs[1].Status = paystack.TransferSuccess
		check(t, transactions(), trs, "clearing holds")
	})
	t.Run("unsent debit forgotten", func(t *testing.T) {
		exec(t, `DELETE FROM rm_payouts_in_flight WHERE reference = 'wd-3'`)
		defer exec(t, `INSERT INTO rm_payouts_in_flight VALUES ('m', 'test', 'wd-3')`)
		check(t, transactions(), transfers(), "clearing holds")
	})
	t.Run("reversed transfer is not paid out", func(t *testing.T) {
		trs := transfers()
		trs[0].Status = paystack.TransferReversed
		check(t, transactions(), trs, "clearing holds")
	})
}
