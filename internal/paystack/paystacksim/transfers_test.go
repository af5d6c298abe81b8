package paystacksim_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/internal/paystack"
)

func recipientFor(t *testing.T, r *rig) paystack.Recipient {
	t.Helper()
	acct := validAccount(t, "022345678")
	rc, err := r.client.CreateTransferRecipient(context.Background(), paystack.RecipientRequest{Name: "Tolu Robert", AccountNumber: acct, BankCode: "058"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rc.RecipientCode, "RCP_") || rc.BankName != "Guaranty Trust Bank" || rc.AccountName == "" || rc.Type != "nuban" {
		t.Fatalf("recipient %+v", rc)
	}
	return rc
}

// Initiate answers pending; the transfer settles by itself and says so
// with a signed transfer.success.
func TestTransferSettlesByItself(t *testing.T) {
	r := start(t, nil)
	ctx := context.Background()
	rc := recipientFor(t, r)
	ref := paystack.TransferReference("0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b")
	tr, err := r.client.InitiateTransfer(ctx, paystack.TransferRequest{Amount: 250_000, Recipient: rc.RecipientCode, Reference: ref, Reason: "withdrawal"})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != "pending" || tr.Reference != ref || !strings.HasPrefix(tr.TransferCode, "TRF_") || tr.Recipient.ID != rc.ID {
		t.Fatalf("initiated %+v", tr)
	}
	r.idle(t)
	ev := r.hook.events()
	if len(ev) != 1 || ev[0].Event != "transfer.success" {
		t.Fatalf("events %+v", ev)
	}
	claimed := must(paystack.TransferOf(ev[0]))
	got := must(r.client.VerifyTransfer(ctx, ref))
	for _, x := range []paystack.Transfer{claimed, got} {
		if x.Status != "success" || x.Amount != 250_000 || x.Reference != ref || x.Recipient.RecipientCode != rc.RecipientCode ||
			x.TransferCode != tr.TransferCode || x.Recipient.AccountNumber != rc.AccountNumber || x.UpdatedAt.IsZero() {
			t.Fatalf("transfer %+v", x)
		}
	}
	if _, err := r.client.VerifyTransfer(ctx, "esc_not_a_transfer_here"); !paystack.IsNotFound(err) {
		t.Fatalf("unknown transfer: %v", err)
	}
}

// failed and reversed return the amount and fee to the balance; each
// outcome has its event; a reversed transfer stays reversed.
func TestSettleTransfer(t *testing.T) {
	r := start(t, nil)
	if err := r.sim.AutoSettleTransfers("", 0); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rc := recipientFor(t, r)
	before := r.sim.Balance()
	refs := []string{paystack.TransferReference("wd-failed-0000000001"), paystack.TransferReference("wd-reversed-00000001")}
	for _, ref := range refs {
		if _, err := r.client.InitiateTransfer(ctx, paystack.TransferRequest{Amount: 1_000_000, Recipient: rc.RecipientCode, Reference: ref}); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.sim.Balance(); got != before-2*(1_000_000+2_500) {
		t.Fatalf("balance %d after two transfers of ₦10,000 from %d", got, before)
	}
	r.idle(t)
	if n := len(r.hook.events()); n != 0 {
		t.Fatalf("%d events before any outcome", n)
	}
	if must(r.client.VerifyTransfer(ctx, refs[0])).Status != "pending" {
		t.Fatal("not pending")
	}
	if err := r.sim.SettleTransfer(refs[0], "failed"); err != nil {
		t.Fatal(err)
	}
	if err := r.sim.SettleTransfer(refs[1], "success"); err != nil {
		t.Fatal(err)
	}
	if err := r.sim.SettleTransfer(refs[1], "reversed"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct{ ref, status string }{{refs[0], "success"}, {refs[1], "success"}, {refs[1], "pending"}} {
		if err := r.sim.SettleTransfer(bad.ref, bad.status); err == nil {
			t.Errorf("%s became %s", bad.ref, bad.status)
		}
	}
	if got := r.sim.Balance(); got != before {
		t.Fatalf("balance %d, want %d back", got, before)
	}
	r.idle(t)
	var names []string
	for _, e := range r.hook.events() {
		names = append(names, e.Event)
	}
	slices.Sort(names) // deliveries run concurrently, as Paystack's do
	if strings.Join(names, ",") != "transfer.failed,transfer.reversed,transfer.success" {
		t.Fatalf("events %v", names)
	}
	if must(r.client.VerifyTransfer(ctx, refs[1])).Status != "reversed" {
		t.Fatal("not reversed")
	}
}

// A duplicate reference is refused, and verify reads the first transfer.
func TestDuplicateReference(t *testing.T) {
	r := start(t, nil)
	ctx := context.Background()
	rc := recipientFor(t, r)
	req := paystack.TransferRequest{Amount: 70_000, Recipient: rc.RecipientCode, Reference: paystack.TransferReference("wd-dup-000000000001")}
	first := must(r.client.InitiateTransfer(ctx, req))
	_, err := r.client.InitiateTransfer(ctx, req)
	if !paystack.IsDuplicateReference(err) {
		t.Fatalf("second initiate: %v", err)
	}
	var ae *paystack.APIError
	if !errors.As(err, &ae) || ae.HTTPStatus != http.StatusBadRequest {
		t.Fatalf("err %#v", err)
	}
	if got := must(r.client.VerifyTransfer(ctx, req.Reference)); got.TransferCode != first.TransferCode {
		t.Fatalf("verify read %+v", got)
	}
	if n := len(r.sim.Transfers()); n != 1 {
		t.Fatalf("%d transfers", n)
	}
	_, err = r.client.InitiateTransfer(ctx, paystack.TransferRequest{Amount: 1, Recipient: "RCP_nobody", Reference: paystack.TransferReference("x")})
	if !errors.As(err, &ae) || ae.Code != "invalid_transfer_recipient" {
		t.Fatalf("unknown recipient: %v", err)
	}
}

// The answer is lost after the transfer was made: the client's retry by
// reference is refused as a duplicate, verify reads it, one transfer.
func TestLostAnswerPaysOnce(t *testing.T) {
	r := start(t, nil)
	ctx := context.Background()
	rc := recipientFor(t, r)
	r.sim.DropAnswer(paystack.OpInitiateTransfer, 1)
	ref := paystack.TransferReference("wd-lost-00000000001")
	_, err := r.client.InitiateTransfer(ctx, paystack.TransferRequest{Amount: 90_000, Recipient: rc.RecipientCode, Reference: ref})
	if !paystack.IsDuplicateReference(err) {
		t.Fatalf("after a lost answer and a retry: %v", err)
	}
	if got := must(r.client.VerifyTransfer(ctx, ref)); got.Amount != 90_000 {
		t.Fatalf("verify %+v", got)
	}
	if n := len(r.sim.Transfers()); n != 1 {
		t.Fatalf("%d transfers, want 1", n)
	}

	// Without retries the caller is told it cannot know.
	noRetry := paystack.New(paystack.Config{BaseURL: r.sim.URL, SecretKey: secret, Retries: -1, Logger: slog.New(slog.DiscardHandler)})
	r.sim.DropAnswer(paystack.OpInitiateTransfer, 1)
	ref2 := paystack.TransferReference("wd-lost-00000000002")
	_, err = noRetry.InitiateTransfer(ctx, paystack.TransferRequest{Amount: 90_000, Recipient: rc.RecipientCode, Reference: ref2})
	if !errors.Is(err, paystack.ErrUncertain) {
		t.Fatalf("lost answer: %v", err)
	}
	if must(noRetry.VerifyTransfer(ctx, ref2)).Reference != ref2 {
		t.Fatal("the transfer whose answer was lost is not there")
	}

	// A retry refused for another reason does not undo the lost one.
	r.sim.DropAnswer(paystack.OpInitiateTransfer, 1)
	r.sim.FailNext(paystack.OpInitiateTransfer, http.StatusBadRequest, 1)
	ref3 := paystack.TransferReference("wd-lost-00000000003")
	_, err = r.client.InitiateTransfer(ctx, paystack.TransferRequest{Amount: 90_000, Recipient: rc.RecipientCode, Reference: ref3})
	var ae *paystack.APIError
	if !errors.Is(err, paystack.ErrUncertain) || errors.As(err, &ae) {
		t.Fatalf("lost answer, then a refusal: %v", err)
	}
	if must(r.client.VerifyTransfer(ctx, ref3)).Reference != ref3 {
		t.Fatal("the transfer whose answer was lost is not there")
	}
}

// A request slower than the client's timeout is uncertain, and took
// effect all the same.
func TestTimeoutIsUncertain(t *testing.T) {
	r := start(t, func(c *paystack.Config) { c.Timeout = 50 * time.Millisecond; c.Retries = -1 })
	ctx := context.Background()
	rc := recipientFor(t, r)
	r.sim.DelayNext(paystack.OpInitiateTransfer, 300*time.Millisecond, 1)
	ref := paystack.TransferReference("wd-slow-00000000001")
	_, err := r.client.InitiateTransfer(ctx, paystack.TransferRequest{Amount: 10_000, Recipient: rc.RecipientCode, Reference: ref})
	if !errors.Is(err, paystack.ErrUncertain) {
		t.Fatalf("err %v, want uncertain", err)
	}
	// The delayed request takes effect once its wait is over (WaitIdle
	// covers it once the simulator has received it; under load it may not
	// have yet, so ask until it has, within a bound).
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r.idle(t)
		got, err := r.client.VerifyTransfer(ctx, ref)
		if err == nil && got.Reference == ref {
			break
		}
		if !paystack.IsNotFound(err) || time.Now().After(deadline) {
			t.Fatalf("the delayed transfer: %+v, %v", got, err)
		}
	}
}

// Injected 5xx answers are retried; a refusal that outlasts the retries
// is uncertain and, being injected before the request took effect, made
// nothing.
func TestFailNext(t *testing.T) {
	r := start(t, func(c *paystack.Config) { c.Retries = 2 })
	ctx := context.Background()
	rc := recipientFor(t, r)
	r.sim.FailNext(paystack.OpInitiateTransfer, http.StatusBadGateway, 2)
	ref := paystack.TransferReference("wd-flaky-0000000001")
	if _, err := r.client.InitiateTransfer(ctx, paystack.TransferRequest{Amount: 10_000, Recipient: rc.RecipientCode, Reference: ref}); err != nil {
		t.Fatalf("two failures then success: %v", err)
	}
	r.sim.FailNext(paystack.OpInitiateTransfer, http.StatusInternalServerError, 3)
	ref2 := paystack.TransferReference("wd-flaky-0000000002")
	_, err := r.client.InitiateTransfer(ctx, paystack.TransferRequest{Amount: 10_000, Recipient: rc.RecipientCode, Reference: ref2})
	if !errors.Is(err, paystack.ErrUncertain) {
		t.Fatalf("err %v", err)
	}
	if _, err := r.client.VerifyTransfer(ctx, ref2); !paystack.IsNotFound(err) {
		t.Fatalf("verify after refusals: %v", err)
	}
	r.sim.FailNext(paystack.OpCreateTransferRecipient, http.StatusBadRequest, 1)
	if _, err := r.client.CreateTransferRecipient(ctx, paystack.RecipientRequest{Name: "A", AccountNumber: rc.AccountNumber, BankCode: "058"}); err == nil ||
		errors.Is(err, paystack.ErrUncertain) {
		t.Fatalf("injected 400: %v", err)
	}
}

// Listings read every page and filter by status and time.
func TestListings(t *testing.T) {
	r := start(t, nil)
	if err := r.sim.AutoSettleTransfers("", 0); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rc := recipientFor(t, r)
	for i := range 7 {
		ref := paystack.TransferReference("wd-list-000000000" + string(rune('a'+i)))
		must(r.client.InitiateTransfer(ctx, paystack.TransferRequest{Amount: int64(1000 + i), Recipient: rc.RecipientCode, Reference: ref}))
	}
	must(0, r.sim.SettleTransfer(paystack.TransferReference("wd-list-000000000a"), "success"))
	all := must(r.client.ListTransfers(ctx, paystack.ListParams{PerPage: 3}))
	if len(all) != 7 {
		t.Fatalf("%d transfers listed", len(all))
	}
	seen := map[string]bool{}
	for _, x := range all {
		seen[x.Reference] = true
		if x.Recipient.RecipientCode != rc.RecipientCode {
			t.Fatalf("listed %+v", x)
		}
	}
	if len(seen) != 7 {
		t.Fatalf("%d distinct transfers", len(seen))
	}
	ok := must(r.client.ListTransfers(ctx, paystack.ListParams{Status: "success", PerPage: 2}))
	if len(ok) != 1 || ok[0].Amount != 1000 {
		t.Fatalf("successes %+v", ok)
	}
	if later := must(r.client.ListTransfers(ctx, paystack.ListParams{From: time.Now().Add(time.Hour)})); len(later) != 0 {
		t.Fatalf("%d transfers from an hour ahead", len(later))
	}
	if earlier := must(r.client.ListTransfers(ctx, paystack.ListParams{To: time.Now().Add(-time.Hour)})); len(earlier) != 0 {
		t.Fatalf("%d transfers until an hour ago", len(earlier))
	}

	cus := must(r.client.CreateCustomer(ctx, paystack.CustomerRequest{Email: "p@example.com"}))
	acct := must(r.client.CreateDedicatedAccount(ctx, paystack.DedicatedAccountRequest{Customer: cus.CustomerCode}))
	for i := range 5 {
		must(r.sim.PayIntoDedicatedAccount(acct.AccountNumber, int64(10_000*(i+1))))
	}
	must(r.client.InitializeTransaction(ctx, paystack.InitializeRequest{Email: "p@example.com", Amount: 100}))
	txs := must(r.client.ListTransactions(ctx, paystack.ListParams{PerPage: 2, Status: "success"}))
	if len(txs) != 5 {
		t.Fatalf("%d successful transactions listed", len(txs))
	}
	if n := len(must(r.client.ListTransactions(ctx, paystack.ListParams{PerPage: 4}))); n != 6 {
		t.Fatalf("%d transactions listed", n)
	}
}

// The HTTP control API drives the simulator from another process, with
// the secret key.
func TestControlOverHTTP(t *testing.T) {
	r := start(t, nil)
	ctx := context.Background()
	cus := must(r.client.CreateCustomer(ctx, paystack.CustomerRequest{Email: "c@example.com"}))
	acct := must(r.client.CreateDedicatedAccount(ctx, paystack.DedicatedAccountRequest{Customer: cus.CustomerCode}))
	post := func(key, path, body string) *http.Response {
		req := must(http.NewRequest(http.MethodPost, r.sim.URL+path, strings.NewReader(body)))
		req.Header.Set("Authorization", "Bearer "+key)
		resp := must(http.DefaultClient.Do(req))
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	if resp := post("sk_test_other", "/_sim/dedicated-account-payments", `{"account_number":"`+acct.AccountNumber+`","amount":100000}`); resp.StatusCode != 401 {
		t.Fatalf("without the key: %d", resp.StatusCode)
	}
	resp := post(secret, "/_sim/dedicated-account-payments", `{"account_number":"`+acct.AccountNumber+`","amount":100000}`)
	var out struct {
		Status bool              `json:"status"`
		Data   map[string]string `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || !out.Status {
		t.Fatalf("%d %v %+v", resp.StatusCode, err, out)
	}
	if tx := must(r.client.VerifyTransaction(ctx, out.Data["reference"])); tx.Amount != 100000 || tx.ReceiverAccountNumber != acct.AccountNumber {
		t.Fatalf("paid %+v", tx)
	}
	if resp := post(secret, "/_sim/faults", `{"kind":"fail","op":"transfer.verify","http_status":503,"n":1}`); resp.StatusCode != 200 {
		t.Fatalf("fault: %d", resp.StatusCode)
	}
	noRetry := paystack.New(paystack.Config{BaseURL: r.sim.URL, SecretKey: secret, Retries: -1, Logger: slog.New(slog.DiscardHandler)})
	if _, err := noRetry.VerifyTransfer(ctx, "esc_0000000000000000"); !errors.Is(err, paystack.ErrUncertain) {
		t.Fatalf("after an injected 503: %v", err)
	}
}
