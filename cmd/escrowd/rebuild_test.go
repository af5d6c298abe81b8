package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/projections"
)

// TestProjectionsRebuildCommand runs `escrowd projections rebuild` as a
// separate process, the way support staff do after a fix, against read
// models that were damaged by hand, while another process keeps projecting
// and writing (a serving instance): each named read model comes back exactly
// as the log says, a model not named stays as it was, the progress goes to
// stderr, and the writes made during the rebuild are all in the rebuilt
// model.
func TestProjectionsRebuildCommand(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewURL(t)
	env := testEnv(t, db)
	var last eventstore.Position
	s := newShop(t, env, db, "Shop", "08031110001", &last)
	if err := projections.CatchUpTo(ctx, env.Store, env.Pool, nil, last, env.Projectors...); err != nil {
		t.Fatal(err)
	}
	snapshot := func(table, order string) string {
		t.Helper()
		var out string
		if err := env.Pool.QueryRow(ctx, `SELECT coalesce(json_agg(t ORDER BY `+order+`)::text, '') FROM `+table+` t`).Scan(&out); err != nil {
			t.Fatal(err)
		}
		return openedRows(t, env, table, out)
	}
	customerMain := func() int64 {
		t.Helper()
		var kobo int64
		if err := env.Pool.QueryRow(ctx, `SELECT balance FROM rm_balances WHERE holder = 'customer' AND holder_id = $1 AND bucket = 'main'`,
			s.customerID).Scan(&kobo); err != nil {
			t.Fatal(err)
		}
		return kobo
	}
	if got := customerMain(); got != money.Naira(3950).Kobo() { // 5000 − 1000 − 50 fee
		t.Fatalf("customer main %d kobo before the damage", got)
	}
	customersBefore := snapshot("rm_customers", "customer_id")

	// The damage: a balance zeroed, a record gone, every customer row gone.
	if _, err := env.Pool.Exec(ctx, `UPDATE rm_balances SET balance = 0 WHERE holder_id = $1`, s.customerID); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Pool.Exec(ctx, `DELETE FROM rm_transactions WHERE customer_id = $1 AND transaction_type = 'withdrawal'`, s.customerID); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Pool.Exec(ctx, `DELETE FROM rm_customers`); err != nil {
		t.Fatal(err)
	}

	// A serving instance: its runner keeps the read models current while
	// top-ups keep coming, during the rebuild.
	runner := projections.NewRunner(env.Store, env.Pool, zap.NewNop(), env.Projectors...)
	rctx, stopRunner := context.WithCancel(ctx)
	var rwg sync.WaitGroup
	rwg.Add(1)
	go func() { defer rwg.Done(); _ = runner.Run(rctx) }()
	defer func() { stopRunner(); rwg.Wait() }()
	svc := app.NewService(app.NewEngine(env.Store, 100))
	actor := app.Actor{MerchantID: s.merchantID, Environment: domain.Test, KeyID: "k"}
	stopWriting := make(chan struct{})
	var (
		wg      sync.WaitGroup
		written []string
		lastPos eventstore.Position
		wErr    error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stopWriting:
				return
			default:
			}
			// A new customer each time (top-ups are once a day each).
			cid, _, err := svc.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "Bo", Lastname: "Ade",
				Email: fmt.Sprintf("bo%d@x.co", i), Phone: fmt.Sprintf("0803222%04d", i)})
			if err == nil {
				var pos eventstore.Position
				_, pos, err = svc.TopUp(ctx, actor, cid, money.Naira(1000))
				written, lastPos = append(written, cid), pos
			}
			if err != nil {
				wErr = err
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	// stderr is not a terminal: no progress bar, and no info logs.
	out, stderr, code := runEscrowd(t, db, "projections", "rebuild", "ledger")
	if code != 0 || !strings.Contains(out, "rebuilt ledger in") || stderr != "" {
		t.Fatalf("rebuild ledger: exit %d\n%s%s", code, out, stderr)
	}
	if strings.Contains(out, "rebuilt customers") {
		t.Fatalf("rebuild ledger rebuilt more:\n%s", out)
	}
	close(stopWriting)
	wg.Wait()
	if wErr != nil {
		t.Fatal(wErr)
	}
	if len(written) == 0 {
		t.Fatal("no writes during the rebuild")
	}
	if err := runner.WaitFor(ctx, lastPos); err != nil {
		t.Fatal(err)
	}
	if got := customerMain(); got != money.Naira(3950).Kobo() {
		t.Fatalf("customer main %d kobo after the rebuild, want 395000", got)
	}
	var n int64
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM rm_transactions WHERE customer_id = $1`, s.customerID).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d records of the customer after the rebuild (%v), want the top-up and the withdrawal", n, err)
	}
	var topped int64
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM rm_balances WHERE holder_id = ANY($1) AND bucket = 'main' AND balance = 100000`,
		written).Scan(&topped); err != nil || topped != int64(len(written)) {
		t.Fatalf("%d of the %d wallets topped up during the rebuild show 1000.00 (%v)", topped, len(written), err)
	}
	// Not named, not rebuilt: only the runner's new customers are there.
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM rm_customers WHERE customer_id = $1`, s.customerID).Scan(&n); err != nil || n != 0 {
		t.Fatalf("rm_customers was rebuilt by `rebuild ledger` (%d, %v)", n, err)
	}

	// All of them, with the runner still active; -v logs each one's start.
	out, stderr, code = runEscrowd(t, db, "projections", "rebuild", "-v")
	if code != 0 || strings.Count(stderr, "rebuild started") != len(env.Projectors) || strings.Contains(stderr, "\r") {
		t.Fatalf("rebuild -v: exit %d\n%s%s", code, out, stderr)
	}
	for _, p := range env.Projectors {
		if !strings.Contains(out, "rebuilt "+p.Name()+" in") {
			t.Fatalf("rebuild did not report %s:\n%s", p.Name(), out)
		}
	}
	var back int64
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM rm_customers WHERE customer_id = $1`, s.customerID).Scan(&back); err != nil || back != 1 {
		t.Fatalf("customer row after rebuild: %d (%v)", back, err)
	}
	// The customers written during the rebuild aside, the table is as it
	// was before the damage, byte for byte.
	var restored string
	if err := env.Pool.QueryRow(ctx, `SELECT coalesce(json_agg(t ORDER BY customer_id)::text, '') FROM rm_customers t WHERE customer_id <> ALL($1::text[])`,
		written).Scan(&restored); err != nil {
		t.Fatal(err)
	}
	if restored = openedRows(t, env, "rm_customers", restored); restored != customersBefore {
		t.Fatalf("rm_customers after rebuild:\n%s\nbefore the damage:\n%s", restored, customersBefore)
	}
	rows := statusRows(t, db)
	for _, p := range env.Projectors {
		if r := rows[p.Name()]; r.Lag != 0 {
			t.Errorf("%s lags %d events after the rebuild", p.Name(), r.Lag)
		}
	}
}

// openedRows is rows (a json_agg of table's rows) with the sealed values
// of its columns opened: each sealing of a value is new (a fresh nonce),
// so a rebuilt row equals the one it replaces once opened.
func openedRows(t *testing.T, env *cliEnv, table, rows string) string {
	t.Helper()
	if rows == "" {
		return rows
	}
	var all []map[string]any
	if err := json.Unmarshal([]byte(rows), &all); err != nil {
		t.Fatal(err)
	}
	for _, row := range all {
		for col, v := range row {
			if s, ok := v.(string); ok && domain.IsSealed(s) {
				plain, err := env.sealer().Open(context.Background(), table+"."+col, s)
				if err != nil {
					t.Fatalf("%s.%s: %v", table, col, err)
				}
				row[col] = plain
			}
		}
	}
	out, err := json.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
