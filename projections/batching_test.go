package projections

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/reference"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
)

// TestReadModelsDoNotDependOnBatching applies one real log (escrows paid,
// confirmed and edited, a multi-unit link, top-ups, a withdrawal whose
// record goes from pending to success) to the ledger and escrow read models
// in three ways, which must give the same tables row for row:
//
//   - one event per batch;
//   - the whole log as one batch (the ledger sums deltas per account and
//     keeps the last version of each record; the escrow projector folds
//     several events of one escrow in memory);
//   - by two projector instances taking turns, as two processes do after a
//     fail-over: each instance's cache of escrow states is then stale, and
//     must be noticed as such (by stream revision) rather than used.
func TestReadModelsDoNotDependOnBatching(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	svc, a, seller, buyer := e.escrowParties(t)
	one := 1
	for i, who := range []string{"buyer", "seller", "both"} {
		res, err := svc.CreateEscrow(ctx, a, seller, escrow.Draft{Amount: money.Naira(10000), Purpose: "x", WhoPays: who, TotalQuantity: &one})
		if err != nil {
			t.Fatal(err)
		}
		es := res.Escrow
		if who == "buyer" {
			fee := true
			r, err := svc.SetAdditionalFee(ctx, a, es.ID, money.Naira(300), &fee)
			if err != nil {
				t.Fatal(err)
			}
			es = r.Escrow
		}
		paid, err := svc.PayEscrows(ctx, a, buyer, allowed, app.EscrowPayment{Reference: fmt.Sprintf("p-%d", i), Amount: es.Due(), EscrowIDs: []string{es.ID}})
		if err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			if _, err := svc.ConfirmEscrow(ctx, a, buyer, paid.Escrows[0].ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Two escrows disputed in the opposite order to their creation: dispute
	// positions follow the openings, whatever the batches.
	var disputed []string
	for i := range 2 {
		res, err := svc.CreateEscrow(ctx, a, seller, escrow.Draft{Amount: money.Naira(1000), Purpose: "d", WhoPays: "buyer", TotalQuantity: &one})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.PayEscrows(ctx, a, buyer, allowed, app.EscrowPayment{Reference: fmt.Sprintf("d-%d", i), Amount: res.Escrow.Due(),
			EscrowIDs: []string{res.Escrow.ID}}); err != nil {
			t.Fatal(err)
		}
		disputed = append(disputed, res.Escrow.ID)
	}
	for _, id := range []string{disputed[1], disputed[0]} {
		if _, err := svc.SubmitDispute(ctx, a, buyer, id, "not delivered", ""); err != nil {
			t.Fatal(err)
		}
	}
	three := 3
	link, err := svc.CreateEscrow(ctx, a, "", escrow.Draft{Amount: money.Naira(2000), Purpose: "link", WhoPays: "buyer", TotalQuantity: &three})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := svc.PayEscrows(ctx, a, buyer, allowed, app.EscrowPayment{Reference: fmt.Sprintf("l-%d", i), Amount: link.Escrow.Due(), EscrowIDs: []string{link.Escrow.ID}}); err != nil {
			t.Fatal(err)
		}
	}
	serial := "123456789"
	check, _ := reference.NUBANCheckDigit("058", serial)
	if _, err := svc.CreateIntent(ctx, a, buyer, allowed, app.IntentRequest{Reference: "wd-1", Type: ledger.Withdrawal, Amount: money.Naira(1000),
		Withdrawal: &ledger.WithdrawalDetails{AccountNumber: serial + string(check), BankCode: "058"}}); err != nil {
		t.Fatal(err)
	}
	rec, last, err := svc.Verify(ctx, a, buyer, allowed, "wd-1")
	if err != nil || rec.Status != ledger.Success {
		t.Fatalf("withdrawal %s: %v", rec.Status, err)
	}
	visible(t, e.store, last)
	events, err := e.store.ReadAll(ctx, eventstore.Start, 100000)
	if err != nil {
		t.Fatal(err)
	}

	tables := []string{"rm_balances", "rm_transactions", "rm_escrows", "rm_escrow_counts", "rm_transaction_counts"}
	// Rows as JSON (the record column's bytes as stored), with seq replaced
	// by its rank: an upsert that hits a conflict still draws a seq, so only
	// the order seq gives is the read model's, not its values.
	rowsOf := map[string]string{
		"rm_balances": `SELECT * FROM rm_balances`,
		"rm_transactions": `SELECT id, merchant_id, environment, customer_id, reference, transaction_type, status, record, created_at,
			row_number() OVER (ORDER BY seq) AS seq_rank FROM rm_transactions`,
		"rm_escrows": `SELECT id, payment_token, merchant_id, environment, seller_id, buyer_id, status, category_id, deleted, state, created_at,
			pos, dispute_pos, row_number() OVER (ORDER BY seq) AS seq_rank FROM rm_escrows`,
		"rm_escrow_counts":      `SELECT * FROM rm_escrow_counts`,
		"rm_transaction_counts": `SELECT * FROM rm_transaction_counts`,
	}
	apply := func(p Projector, batch []eventstore.RecordedEvent) {
		t.Helper()
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		if err := p.Apply(ctx, tx, batch); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	snapshot := func() string {
		t.Helper()
		var out string
		for _, tbl := range tables {
			var rows string
			if err := e.pool.QueryRow(ctx, `SELECT coalesce(string_agg(to_json(t)::text, E'\n' ORDER BY to_json(t)::text), '') FROM (`+rowsOf[tbl]+`) t`).Scan(&rows); err != nil {
				t.Fatal(err)
			}
			out += tbl + ":\n" + rows + "\n"
		}
		return out
	}
	reset := func() {
		t.Helper()
		for _, p := range []Projector{Ledger{}, NewEscrows()} {
			if _, err := e.pool.Exec(ctx, p.Schema()); err != nil {
				t.Fatal(err)
			}
		}
		for _, tbl := range tables {
			if _, err := e.pool.Exec(ctx, `TRUNCATE `+tbl+` RESTART IDENTITY`); err != nil {
				t.Fatal(err)
			}
		}
	}

	reset()
	ledgerP, escrowsP := Ledger{}, NewEscrows()
	for i := range events {
		apply(ledgerP, events[i:i+1])
		apply(escrowsP, events[i:i+1])
	}
	single := snapshot()
	for _, want := range []string{"withdrawal", `"status":"success"`, "COMPLETED", "ONGOING"} {
		if !strings.Contains(single, want) {
			t.Fatalf("the log did not produce %q in the read models:\n%s", want, single)
		}
	}

	reset()
	apply(Ledger{}, events)
	apply(NewEscrows(), events)
	if got := snapshot(); got != single {
		t.Fatalf("one batch differs from one event per batch:\n%s", lineDiff(got, single))
	}

	reset()
	a1, a2 := NewEscrows(), NewEscrows()
	for i := range events {
		p := a1
		if (i/3)%2 == 1 { // three events each, in turn
			p = a2
		}
		apply(Ledger{}, events[i:i+1])
		apply(p, events[i:i+1])
	}
	if got := snapshot(); got != single {
		t.Fatalf("two instances in turn differ from one:\n%s", lineDiff(got, single))
	}
}

// lineDiff lists the lines only in got (+) and only in want (-).
func lineDiff(got, want string) string {
	count := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			m[l]++
		}
		return m
	}
	g, w := count(got), count(want)
	var b strings.Builder
	for l, n := range g {
		if n > w[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	for l, n := range w {
		if n > g[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	return b.String()
}
