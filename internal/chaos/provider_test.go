package chaos

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/internal/paystack"
	"github.com/escrowd/escrowd/internal/paystack/paystacksim"
)

// The test environment's provider in TestChaos is the Paystack simulator,
// run by the test itself: its signed events reach the instances through a
// round-robin proxy of their own (an event an instance could not take is
// delivered again, as Paystack does), and the workload pays deposits into
// dedicated accounts, pays escrows by card and settles bank payouts there.

// simKey is the simulator's secret key, every instance's Paystack key.
const simKey = "sk_test_chaos_simulator"

// startProvider starts the simulator, posting its events to hooks, and
// returns the instances' environment for it.
func startProvider(hooks string) (*paystacksim.Sim, []string, error) {
	sim, err := paystacksim.Start(paystacksim.Config{SecretKey: simKey, WebhookURL: hooks + "/hooks/paystack/test",
		EventAttempts: 30, EventBackoff: 250 * time.Millisecond})
	if err != nil {
		return nil, nil, err
	}
	// Payouts stay pending until the workload settles them.
	if err := sim.AutoSettleTransfers("", 0); err != nil {
		sim.Close()
		return nil, nil, err
	}
	return sim, []string{"ESCROW_PROVIDER_TEST=paystack", "ESCROW_PAYSTACK_SECRET_KEY_TEST=" + simKey,
		"ESCROW_PAYSTACK_BASE_URL=" + sim.URL, "ESCROW_PAYSTACK_DVA_BANK=test-bank"}, nil
}

// providerWait bounds how long an operation waits for the provider's
// event to take effect before it leaves the outcome to the checks.
const providerWait = 60 * time.Second

// awaitStatus verifies ref until its record has one of want, and returns
// that status ("" when it did not come within providerWait).
func (p *op) awaitStatus(cid, ref string, want ...string) string {
	deadline := time.Now().Add(providerWait)
	for {
		r := p.w.c.do(p.rng, p.std(http.MethodPost, "/v1/payment/verify", cid, map[string]any{"reference": ref}))
		if r.outcome == acked {
			st, _ := r.obj()["status"].(string)
			for _, w := range want {
				if st == w {
					return st
				}
			}
		}
		if time.Now().After(deadline) {
			return ""
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// opDedicatedDeposit stages a deposit, transfers its amount into the
// customer's dedicated account at the provider, and expects the intent
// credited once: money the provider received is owed to the customer
// whatever the faults, so it is booked as soon as the transfer is made.
func opDedicatedDeposit(p *op) {
	a, _ := p.customer(0)
	if a == "" {
		return
	}
	amount, ref := int64(1000+p.rng.IntN(5000)), p.ref()
	rec, ok := p.need(p.std(http.MethodPost, "/v1/payment/create-intent", a, map[string]any{"reference": ref, "amount": amount,
		"transactionType": "deposit"}), nil)
	if !ok {
		return
	}
	acct, _ := rec["depositAccount"].(map[string]any)
	number, _ := acct["accountNumber"].(string)
	if number == "" {
		p.anomalies = append(p.anomalies, fmt.Sprintf("%s: deposit intent %s without a dedicated account: %v", p.name, ref, rec))
		return
	}
	if _, err := p.w.sim.PayIntoDedicatedAccount(number, naira(amount)); err != nil {
		p.anomalies = append(p.anomalies, fmt.Sprintf("%s: transfer into %s: %v", p.name, number, err))
		return
	}
	p.base = p.base.add(delta{cust(a): {naira(amount), 0}})
	p.refs = append(p.refs, refCheck{merchant: p.m.id, customer: a, reference: ref})
	p.awaitStatus(a, ref, "success")
}

// opCardEscrow pays a 10,000 escrow (10,250 due) by card on the
// provider's page: the verified charge funds the escrow in one append,
// the buyer's escrow balance holding 10,250, the main balance untouched.
func opCardEscrow(p *op) {
	seller, _ := p.customer(0)
	buyer, _ := p.customer(0)
	if seller == "" || buyer == "" {
		return
	}
	e, ok := p.need(p.std(http.MethodPost, "/v1/escrow/create", seller, map[string]any{"amount": 10000, "purpose": "Phone",
		"whoPays": "buyer", "maxDelivery": 3, "deliveryTimeline": "days"}), nil)
	if !ok {
		return
	}
	id, _ := e["id"].(string)
	ref := p.ref()
	rec, ok := p.need(p.std(http.MethodPost, "/v1/payment/create-intent", buyer, map[string]any{"amount": 10250, "reference": ref,
		"transactionType": "escrow", "gateway": "card", "escrowDetails": map[string]any{"escrowId": id}}), nil)
	if !ok {
		return
	}
	page, _ := rec["authorizationUrl"].(string)
	code := page[strings.LastIndexByte(page, '/')+1:]
	var charge string
	for _, tx := range p.w.sim.Transactions() {
		if tx.AccessCode == code {
			charge = tx.Reference
		}
	}
	if charge == "" {
		p.anomalies = append(p.anomalies, fmt.Sprintf("%s: payment page %q is no transaction at the provider", p.name, page))
		return
	}
	if err := p.w.sim.CompleteCheckout(charge, "card", true); err != nil {
		p.anomalies = append(p.anomalies, fmt.Sprintf("%s: pay %s: %v", p.name, charge, err))
		return
	}
	p.base = p.base.add(delta{cust(buyer): {0, naira(10250)}})
	p.refs = append(p.refs, refCheck{merchant: p.m.id, customer: buyer, reference: ref})
	p.awaitStatus(buyer, ref, "success")
}

// withdrawAtProvider verifies a staged bank withdrawal on the provider:
// debited and pending, its transfer is settled at the provider (failed
// when fails), and the provider's event settles it here: a failed payout
// returns the whole debit.
func (p *op) withdrawAtProvider(a, ref string, amount int64, fails bool) {
	debit := naira(amount) + 50*100
	r, ok := p.step(p.std(http.MethodPost, "/v1/payment/verify", a, map[string]any{"reference": ref}),
		delta{cust(a): {-debit, 0}}, refCheck{merchant: p.m.id, customer: a, reference: ref})
	if !ok {
		return // if it was debited, its payout stays pending at the provider
	}
	rec := r.obj()
	if r.outcome == acked && rec["status"] != "pending" {
		p.anomalies = append(p.anomalies, fmt.Sprintf("%s: withdrawal %s status %v, want pending", p.name, ref, rec["status"]))
		return
	}
	id, _ := rec["id"].(string)
	transfer := paystack.TransferReference(id)
	status, want := paystack.TransferSuccess, "success"
	if fails {
		status, want = paystack.TransferFailed, "failed"
	}
	// The transfer is sent after the debit (or by the payout resumer
	// after a crash): settled once the provider has it.
	for deadline := time.Now().Add(providerWait); ; time.Sleep(100 * time.Millisecond) {
		if err := p.w.sim.SettleTransfer(transfer, status); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return // never sent: the checks find it debited and in flight
		}
	}
	returned := delta{cust(a): {debit, 0}}
	if got := p.awaitStatus(a, ref, want); got == "" && fails {
		p.alts = []delta{{}, returned} // the return is still to come
		return
	}
	if fails {
		p.base = p.base.add(returned)
	}
}

// providerMoney checks the simulator's own record of money against the
// ledger: the fees it kept of collections are the platform's processing
// costs, and what it received and paid out is what the clearing accounts
// moved (besides top-ups, which no provider sees): clearing = fees -
// received - top-ups + paid out (sent, or debited and not sent yet).
func (k *checker) providerMoney(ctx context.Context, v *verdict) {
	if sim := k.w.sim; sim != nil {
		k.providerRecords(ctx, v, sim.Transactions(), sim.Transfers())
	}
}

// providerRecords is providerMoney's check of the provider's records
// against the ledger's read models.
func (k *checker) providerRecords(ctx context.Context, v *verdict, transactions []paystacksim.TransactionRecord, transfers []paystacksim.TransferRecord) {
	var received, fees, paidOut int64
	for _, tx := range transactions {
		if tx.Status == paystack.TransactionSuccess {
			received, fees = received+tx.Amount, fees+tx.Fees
		}
	}
	sent := map[string]bool{}
	for _, tr := range transfers {
		sent[tr.Reference] = true
		if tr.Status != paystack.TransferFailed && tr.Status != paystack.TransferReversed {
			paidOut += tr.Amount
		}
	}
	var cost, clearing, topUps, unsent int64
	if err := k.pool.QueryRow(ctx, `SELECT coalesce(sum(balance), 0)::bigint FROM rm_balances
		WHERE environment = 'test' AND holder = 'platform' AND bucket = 'cost'`).Scan(&cost); err != nil {
		v.fail("provider: %v", err)
		return
	}
	if err := k.pool.QueryRow(ctx, `SELECT coalesce(sum(balance), 0)::bigint FROM rm_balances
		WHERE environment = 'test' AND holder = 'external'`).Scan(&clearing); err != nil {
		v.fail("provider: %v", err)
		return
	}
	if err := k.pool.QueryRow(ctx, `SELECT coalesce(sum(round((record->>'amount')::numeric * 100)), 0)::bigint FROM rm_transactions
		WHERE environment = 'test' AND reference LIKE 'TOPUP-%' AND status = 'success'`).Scan(&topUps); err != nil {
		v.fail("provider: %v", err)
		return
	}
	rows, err := k.pool.Query(ctx, `SELECT t.id, round((t.record->>'amount')::numeric * 100)::bigint FROM rm_transactions t
		JOIN rm_payouts_in_flight f USING (merchant_id, environment, reference)
		WHERE t.environment = 'test' AND t.transaction_type = 'withdrawal'`)
	if err != nil {
		v.fail("provider: %v", err)
		return
	}
	for rows.Next() {
		var id string
		var kobo int64
		if err := rows.Scan(&id, &kobo); err != nil {
			v.fail("provider: %v", err)
		}
		if !sent[paystack.TransferReference(id)] {
			unsent += kobo
		}
	}
	rows.Close()
	if cost != -fees {
		v.fail("provider: it kept %s in fees, the processing costs are %s", money.Amount(fees), money.Amount(cost))
	}
	if want := fees - received - topUps + paidOut + unsent; clearing != want {
		v.fail("provider: clearing holds %s, want %s (received %s, fees %s, paid out %s, debited and unsent %s, top-ups %s)",
			money.Amount(clearing), money.Amount(want), money.Amount(received), money.Amount(fees), money.Amount(paidOut),
			money.Amount(unsent), money.Amount(topUps))
	}
	v.say("provider: received %s (fees %s), paid out %s (%s debited and not yet sent); the ledger agrees",
		money.Amount(received), money.Amount(fees), money.Amount(paidOut), money.Amount(unsent))
}

// providerSettled waits until the simulator has delivered every event
// and the instances have processed each one.
func (k *checker) providerSettled(ctx context.Context, timeout time.Duration) error {
	sim := k.w.sim
	if sim == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := sim.WaitIdle(ctx); err != nil {
		return fmt.Errorf("simulator deliveries: %w", err)
	}
	for {
		var open int
		if err := k.pool.QueryRow(ctx, `SELECT count(*) FROM provider_inbox WHERE state <> 'done'`).Scan(&open); err != nil {
			return err
		}
		if open == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d provider events not processed", open)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
