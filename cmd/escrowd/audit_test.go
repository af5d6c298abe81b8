package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/reference"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/storetest"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/audit"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/internal/redact"
	"github.com/escrowd/escrowd/projections"
)

// TestEscrowdProcess is not a test: runEscrowd re-executes the test binary
// through it as the escrowd command, so exit codes are main's own.
func TestEscrowdProcess(t *testing.T) {
	if os.Getenv("ESCROWD_TEST_PROCESS") != "1" {
		return
	}
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	os.Args = append([]string{"escrowd"}, args...)
	main()
	os.Exit(0)
}

// runEscrowd runs `escrowd args...` in a child process against db.
func runEscrowd(t *testing.T, db string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runEscrowdIn(t, append(os.Environ(), "DATABASE_URL="+db), args...)
}

// runEscrowdIn runs `escrowd args...` in a child process with the
// environment env.
func runEscrowdIn(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestEscrowdProcess$", "--"}, args...)...)
	cmd.Env = append(env, "ESCROWD_TEST_PROCESS=1", "ESCROW_DATA_DIR="+t.TempDir())
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// shop is a merchant with one customer who topped up 5000 and withdrew
// 1000 to a bank (fee 50).
type shop struct {
	merchantID, customerID string
}

func newShop(t *testing.T, env *cliEnv, db, name, phone string, last *eventstore.Position) shop {
	t.Helper()
	ctx := context.Background()
	out, err := cli(t, db, "merchant", "create", "--name", name, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		MerchantID string `json:"merchantId"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	svc := service(env) // the wiring commands use: emails and phones reserved by blind index
	a := app.Actor{MerchantID: m.MerchantID, Environment: domain.Test, KeyID: "k"}
	perms := customer.Permissions{CanBuy: true, CanSell: true, CanWithdraw: true}
	cid, _, err := svc.CreateCustomer(ctx, a, customer.NewCustomer{Firstname: "Adaeze", Lastname: "Obiageli", Email: phone + "@x.co", Phone: phone})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.TopUp(ctx, a, cid, money.Naira(5000)); err != nil {
		t.Fatal(err)
	}
	serial := "123456789"
	check, _ := reference.NUBANCheckDigit("058", serial)
	in := app.IntentRequest{Reference: "wd-1", Type: ledger.Withdrawal, Amount: money.Naira(1000),
		Withdrawal: &ledger.WithdrawalDetails{AccountNumber: serial + string(check), BankCode: "058"}}
	if _, err := svc.CreateIntent(ctx, a, cid, perms, in); err != nil {
		t.Fatal(err)
	}
	rec, pos, err := svc.Verify(ctx, a, cid, perms, "wd-1")
	if err != nil || rec.Status != ledger.Success {
		t.Fatalf("withdrawal %s: %v", rec.Status, err)
	}
	if last.Less(pos) {
		*last = pos
	}
	return shop{m.MerchantID, cid}
}

func TestAuditAndEventsExportCommands(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewURL(t)
	env := testEnv(t, db)
	var last eventstore.Position
	a := newShop(t, env, db, "Shop", "08031110001", &last)
	b := newShop(t, env, db, "Other", "08031110002", &last)
	// Make every write readable and projected before the child processes
	// look (they only see the log's readable head).
	if err := projections.CatchUpTo(ctx, env.Store, env.Pool, nil, last, env.Projectors...); err != nil {
		t.Fatal(err)
	}

	out, stderr, code := runEscrowd(t, db, "audit", "--merchant", a.merchantID)
	if code != 0 || !strings.Contains(out, "clean") || !strings.Contains(out, "movements") {
		t.Fatalf("clean audit: exit %d\n%s%s", code, out, stderr)
	}
	out, stderr, code = runEscrowd(t, db, "audit", "--merchant", a.merchantID, "--json")
	var rep audit.Report
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || !rep.Clean() || rep.Movements != 2 || rep.Records != 2 || rep.Wallets != 1 {
		t.Fatalf("audit --json: exit %d\n%s%s", code, out, stderr)
	}

	if _, err := env.Pool.Exec(ctx, `UPDATE rm_balances SET balance = balance + 1 WHERE merchant_id = $1 AND holder_id = $2 AND bucket = 'main'`,
		a.merchantID, a.customerID); err != nil {
		t.Fatal(err)
	}
	out, stderr, code = runEscrowd(t, db, "audit", "--merchant", a.merchantID)
	want := "balance test customer:" + a.customerID + ":main: expected 3950, found 3950.01"
	if code != 1 || !strings.Contains(out, want) || !strings.Contains(stderr, "1 difference") {
		t.Fatalf("corrupted audit: exit %d, want a line %q\n%s%s", code, want, out, stderr)
	}
	out, _, code = runEscrowd(t, db, "audit", "--merchant", a.merchantID, "--json")
	if code != 1 || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Differences) != 1 || rep.Differences[0].Check != audit.CheckBalance {
		t.Fatalf("corrupted audit --json: exit %d\n%s", code, out)
	}
	// The other merchant is untouched.
	if out, stderr, code = runEscrowd(t, db, "audit", "--merchant", b.merchantID); code != 0 {
		t.Fatalf("other merchant's audit: exit %d\n%s%s", code, out, stderr)
	}
	if _, stderr, code = runEscrowd(t, db, "audit"); code != 2 || !strings.Contains(stderr, "--merchant is required") {
		t.Fatalf("audit without --merchant: exit %d %s", code, stderr)
	}
	if _, stderr, code = runEscrowd(t, db, "audit", "--merchant", "nope"); code != 1 || !strings.Contains(stderr, "merchant not found") {
		t.Fatalf("audit of an unknown merchant: exit %d %s", code, stderr)
	}

	// The export covers the log's readable head when it starts.
	storetest.WaitReadable(t, env.Store, last)
	var mine []eventstore.RecordedEvent
	all, err := env.Store.ReadAll(ctx, eventstore.Start, 100000)
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range all {
		var m domain.Meta
		if json.Unmarshal(re.Metadata, &m) == nil && m.MerchantID == a.merchantID {
			mine = append(mine, re)
		}
	}
	out, stderr, code = runEscrowd(t, db, "events", "export", "--merchant", a.merchantID)
	if code != 0 {
		t.Fatalf("events export: exit %d %s", code, stderr)
	}
	lines := exported(t, out)
	if len(lines) != len(mine) || len(lines) == 0 {
		t.Fatalf("exported %d events, the log has %d of the merchant", len(lines), len(mine))
	}
	types := map[string]bool{}
	for i, l := range lines {
		re := mine[i]
		want, err := redact.Data(re.Type, re.Data)
		if err != nil {
			t.Fatal(err)
		}
		if l.Position != re.Position || l.Stream != re.Stream || l.Revision != re.Revision || l.Type != re.Type ||
			!l.RecordedAt.Equal(re.RecordedAt) || !jsonEqual(l.Data, want) || l.Metadata.MerchantID != a.merchantID {
			t.Fatalf("line %d: %+v, want event %+v", i, l, re)
		}
		if l.Type == "merchant.created" && !strings.Contains(string(l.Data), `"live":"[redacted]"`) {
			t.Fatalf("signing secrets exported: %s", l.Data)
		}
		if i > 0 && !lines[i-1].Position.Less(l.Position) {
			t.Fatalf("line %d out of commit order", i)
		}
		types[l.Type] = true
	}
	for _, typ := range []string{"merchant.created", "customer.created", "wallet.posted", "payment.settled", "payment.payout_completed"} {
		if !types[typ] {
			t.Fatalf("no %s exported: %v", typ, types)
		}
	}
	if strings.Contains(out, b.merchantID) || strings.Contains(out, b.customerID) {
		t.Fatal("the other merchant's events were exported")
	}

	// --secrets exports the stored data as it is.
	out, _, code = runEscrowd(t, db, "events", "export", "--merchant", a.merchantID, "--secrets")
	if full := exported(t, out); code != 0 || len(full) != len(mine) {
		t.Fatalf("export --secrets: exit %d, %d lines", code, len(full))
	} else {
		for i, l := range full {
			if !jsonEqual(l.Data, mine[i].Data) {
				t.Fatalf("export --secrets line %d: %s, want %s", i, l.Data, mine[i].Data)
			}
		}
	}

	out, _, code = runEscrowd(t, db, "events", "export", "--merchant", a.merchantID, "--type", "wallet.posted,payment.settled")
	filtered := exported(t, out)
	if code != 0 || len(filtered) != 3 { // two wallet postings, one top-up settlement
		t.Fatalf("export --type: exit %d, %d lines\n%s", code, len(filtered), out)
	}
	for _, l := range filtered {
		if l.Type != "wallet.posted" && l.Type != "payment.settled" {
			t.Fatalf("export --type gave %s", l.Type)
		}
	}
	tomorrow := time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)
	if out, _, code = runEscrowd(t, db, "events", "export", "--merchant", a.merchantID, "--from", tomorrow); code != 0 || out != "" {
		t.Fatalf("export --from tomorrow: exit %d\n%s", code, out)
	}
	today := time.Now().UTC().Format(time.DateOnly)
	if out, _, code = runEscrowd(t, db, "events", "export", "--merchant", a.merchantID, "--from", today, "--to", today); code != 0 ||
		len(exported(t, out)) != len(mine) {
		t.Fatalf("export of today: exit %d\n%s", code, out)
	}
	if out, _, code = runEscrowd(t, db, "events", "export", "--merchant", a.merchantID, "--to", "2000-01-01T00:00:00Z"); code != 0 || out != "" {
		t.Fatalf("export --to 2000: exit %d\n%s", code, out)
	}
	if _, _, code = runEscrowd(t, db, "events", "export", "--merchant", a.merchantID, "--from", "yesterday"); code != 2 {
		t.Fatalf("export --from yesterday: exit %d", code)
	}
	if _, _, code = runEscrowd(t, db, "events", "export"); code != 2 {
		t.Fatalf("export without --merchant: exit %d", code)
	}
}

type exportLine struct {
	Position   eventstore.Position `json:"position"`
	Stream     string              `json:"stream"`
	Revision   uint64              `json:"revision"`
	Type       string              `json:"type"`
	Data       json.RawMessage     `json:"data"`
	Metadata   domain.Meta         `json:"metadata"`
	RecordedAt time.Time           `json:"recordedAt"`
}

// exported parses an export: one JSON object a line with exactly the
// export's fields, nothing else.
func exported(t *testing.T, out string) []exportLine {
	t.Helper()
	if out == "" {
		return nil
	}
	var lines []exportLine
	for i, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &fields); err != nil {
			t.Fatalf("line %d is not JSON: %v\n%s", i, err, l)
		}
		var names []string
		for k := range fields {
			names = append(names, k)
		}
		sort.Strings(names)
		if got := strings.Join(names, ","); got != "data,id,metadata,position,recordedAt,revision,stream,type" {
			t.Fatalf("line %d has fields %s", i, got)
		}
		var e exportLine
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		lines = append(lines, e)
	}
	return lines
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// serve refuses a role it does not know (a typo that started nothing and
// exited 0 would read as a clean stop to a supervisor).
func TestServeRefusesAnUnknownRole(t *testing.T) {
	db := pgtest.NewURL(t)
	for roles, unknown := range map[string]string{"projectors": `"projectors"`, "api,webhook": `"webhook"`, "api,": `""`} {
		_, stderr, code := runEscrowd(t, db, "serve", "--role", roles, "--addr", "127.0.0.1:0")
		if code != 2 || !strings.Contains(stderr, "unknown role") {
			t.Fatalf("serve --role %s: exit %d, stderr %q; want 2 and the unknown role named", roles, code, stderr)
		}
		if !strings.Contains(stderr, "unknown role "+unknown) {
			t.Fatalf("serve --role %s: stderr %q does not name the unknown role %s", roles, stderr, unknown)
		}
	}
}

// Roles may be listed with spaces around the commas (" api , projector "):
// serve trims them instead of refusing a valid list.
func TestServeAcceptsSpacedRoles(t *testing.T) {
	db := pgtest.NewURL(t)
	env := testEnv(t, db)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // start and stop at once: only the roles are under test
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := serve(ctx, mustConfig(t, db), env, " api , projector ", ln); err != nil {
		t.Fatalf("serve --role ' api , projector ': %v", err)
	}
}
