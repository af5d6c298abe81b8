package paystacksim_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain/reference"
	"github.com/escrowd/escrowd/internal/paystack"
	"github.com/escrowd/escrowd/internal/paystack/paystacksim"
)

const secret = "sk_test_sim0123456789abcdef0123456789abcdef"

// hook is a webhook receiver that checks signatures the way the service
// must, and answers what it is told to.
type hook struct {
	mu       sync.Mutex
	srv      *httptest.Server
	accepted []paystack.Event
	refused  int
	fail     int // answer 500 to this many signed events first
}

func newHook(t *testing.T) *hook {
	h := &hook{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		if !paystack.VerifySignature(secret, body, r.Header.Get("x-paystack-signature")) {
			h.refused++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if h.fail > 0 {
			h.fail--
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		e, err := paystack.ParseEvent(body)
		if err != nil {
			t.Errorf("a signed event that does not parse: %v", err)
		}
		h.accepted = append(h.accepted, e)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hook) events() []paystack.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]paystack.Event(nil), h.accepted...)
}

type rig struct {
	sim    *paystacksim.Sim
	client *paystack.Client
	hook   *hook
}

func start(t *testing.T, clientCfg func(*paystack.Config)) *rig {
	t.Helper()
	h := newHook(t)
	sim, err := paystacksim.Start(paystacksim.Config{SecretKey: secret, WebhookURL: h.srv.URL + "/hooks/paystack/test",
		EventBackoff: 5 * time.Millisecond, SettleAfter: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	cfg := paystack.Config{BaseURL: sim.URL, SecretKey: secret, Backoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)}
	if clientCfg != nil {
		clientCfg(&cfg)
	}
	return &rig{sim: sim, client: paystack.New(cfg), hook: h}
}

func (r *rig) idle(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.sim.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
}

// validAccount is a NUBAN at GTBank that resolves.
func validAccount(t *testing.T, serial string) string {
	t.Helper()
	d, ok := reference.NUBANCheckDigit("058", serial)
	if !ok {
		t.Fatal("bad serial")
	}
	return serial + string(d)
}

func TestWrongKeyIs401(t *testing.T) {
	r := start(t, func(c *paystack.Config) { c.SecretKey = "sk_test_wrong" })
	_, err := r.client.VerifyTransfer(context.Background(), "esc_0123456789abcdef")
	var ae *paystack.APIError
	if !errors.As(err, &ae) || ae.HTTPStatus != 401 || ae.Message != "Invalid key" {
		t.Fatalf("err %v", err)
	}
}

func TestNonLoopbackIsRefused(t *testing.T) {
	for _, u := range []string{"http://192.0.2.1/hook", "http://example.com/hook", "ftp://127.0.0.1/x"} {
		if _, err := paystacksim.New(paystacksim.Config{SecretKey: secret, WebhookURL: u}); err == nil {
			t.Errorf("webhook %s accepted", u)
		}
	}
	if _, err := paystacksim.Start(paystacksim.Config{SecretKey: secret, Addr: "0.0.0.0:0"}); err == nil {
		t.Error("listening on every address accepted")
	}
}

// A customer, its dedicated account, a transfer into it: one success
// transaction with channel dedicated_nuban and a signed charge.success the
// client reads the receiving account from.
func TestDedicatedAccountDeposit(t *testing.T) {
	r := start(t, nil)
	ctx := context.Background()
	cus, err := r.client.CreateCustomer(ctx, paystack.CustomerRequest{Email: "ada@example.com", FirstName: "Ada", LastName: "Obi", Phone: "+2348030000000"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cus.CustomerCode, "CUS_") || cus.Email != "ada@example.com" {
		t.Fatalf("customer %+v", cus)
	}
	acct, err := r.client.CreateDedicatedAccount(ctx, paystack.DedicatedAccountRequest{Customer: cus.CustomerCode, PreferredBank: "wema-bank"})
	if err != nil {
		t.Fatal(err)
	}
	if acct.BankName != "Wema Bank" || acct.BankSlug != "wema-bank" || acct.CustomerCode != cus.CustomerCode ||
		!reference.ValidNUBAN("035", acct.AccountNumber) || !strings.HasSuffix(acct.AccountName, "/ ADA OBI") {
		t.Fatalf("account %+v", acct)
	}
	again, err := r.client.CreateDedicatedAccount(ctx, paystack.DedicatedAccountRequest{Customer: cus.CustomerCode, PreferredBank: "wema-bank"})
	if err != nil || again.AccountNumber != acct.AccountNumber {
		t.Fatalf("asked again: %+v, %v", again, err)
	}
	test, err := r.client.CreateDedicatedAccount(ctx, paystack.DedicatedAccountRequest{Customer: must(r.client.CreateCustomer(ctx,
		paystack.CustomerRequest{Email: "bo@example.com"})).CustomerCode, PreferredBank: "test-bank"})
	if err != nil || test.BankName != "Test Bank" {
		t.Fatalf("test-bank account %+v, %v", test, err)
	}

	ref, err := r.sim.PayIntoDedicatedAccount(acct.AccountNumber, 5_000_000)
	if err != nil {
		t.Fatal(err)
	}
	r.idle(t)
	events := r.hook.events()
	if len(events) != 1 || events[0].Event != "charge.success" {
		t.Fatalf("events %+v", events)
	}
	claimed, err := paystack.TransactionOf(events[0])
	if err != nil {
		t.Fatal(err)
	}
	tx, err := r.client.VerifyTransaction(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []paystack.Transaction{claimed, tx} {
		if x.Reference != ref || x.Status != "success" || x.Channel != "dedicated_nuban" || x.Amount != 5_000_000 ||
			x.Fees != 30_000 || x.ReceiverAccountNumber != acct.AccountNumber || x.ReceiverBank != "Wema Bank" ||
			x.Customer.CustomerCode != cus.CustomerCode || x.PaidAt.IsZero() || x.Currency != "NGN" {
			t.Fatalf("transaction %+v", x)
		}
	}
	small, _ := r.sim.PayIntoDedicatedAccount(acct.AccountNumber, 10_000)
	if tx := must(r.client.VerifyTransaction(ctx, small)); tx.Fees != 100 {
		t.Fatalf("fee of ₦100 is %d kobo, want 1%% = 100", tx.Fees)
	}
	if _, err := r.sim.PayIntoDedicatedAccount("0000000000", 100); err == nil {
		t.Fatal("a payment into no account")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Initialize, the payer's checkout page, the redirect to the callback, and
// verify.
func TestCheckout(t *testing.T) {
	r := start(t, nil)
	ctx := context.Background()
	auth, err := r.client.InitializeTransaction(ctx, paystack.InitializeRequest{Email: "buyer@example.com", Amount: 1_000_000,
		Reference: "pi_0193a1b2c3d4", CallbackURL: "http://127.0.0.1:8080/checkout/return?s=1", Channels: []string{"card", "bank", "ussd"}})
	if err != nil {
		t.Fatal(err)
	}
	if auth.Reference != "pi_0193a1b2c3d4" || auth.AuthorizationURL != r.sim.URL+"/_sim/checkout/"+auth.AccessCode {
		t.Fatalf("authorization %+v", auth)
	}
	if tx := must(r.client.VerifyTransaction(ctx, auth.Reference)); tx.Status != "abandoned" || tx.Amount != 1_000_000 {
		t.Fatalf("before payment %+v", tx)
	}
	_, err = r.client.InitializeTransaction(ctx, paystack.InitializeRequest{Email: "buyer@example.com", Amount: 1_000_000, Reference: auth.Reference})
	if !paystack.IsDuplicateReference(err) {
		t.Fatalf("second initialize: %v", err)
	}

	page := must(http.Get(auth.AuthorizationURL))
	html := string(must(io.ReadAll(page.Body)))
	page.Body.Close()
	if page.StatusCode != 200 || !strings.Contains(html, `value="card"`) || !strings.Contains(html, "10000.00") {
		t.Fatalf("checkout page %d:\n%s", page.StatusCode, html)
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp := must(noFollow.PostForm(auth.AuthorizationURL, map[string][]string{"pay": {"ussd"}}))
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || loc != "http://127.0.0.1:8080/checkout/return?reference=pi_0193a1b2c3d4&s=1&trxref=pi_0193a1b2c3d4" {
		t.Fatalf("after paying: %d %s", resp.StatusCode, loc)
	}
	tx := must(r.client.VerifyTransaction(ctx, auth.Reference))
	if tx.Status != "success" || tx.Channel != "ussd" || tx.Fees != 25_000 || tx.Customer.Email != "buyer@example.com" {
		t.Fatalf("after payment %+v", tx)
	}
	r.idle(t)
	if ev := r.hook.events(); len(ev) != 1 || ev[0].Event != "charge.success" {
		t.Fatalf("events %+v", ev)
	}
	if err := r.sim.CompleteCheckout(auth.Reference, "card", true); err == nil {
		t.Fatal("a transaction paid twice")
	}

	failed := must(r.client.InitializeTransaction(ctx, paystack.InitializeRequest{Email: "b@example.com", Amount: 50_000, Channels: []string{"card"}}))
	if err := r.sim.CompleteCheckout(failed.Reference, "ussd", true); err == nil {
		t.Fatal("paid with a channel the transaction does not allow")
	}
	if err := r.sim.CompleteCheckout(failed.Reference, "card", false); err != nil {
		t.Fatal(err)
	}
	if tx := must(r.client.VerifyTransaction(ctx, failed.Reference)); tx.Status != "failed" {
		t.Fatalf("declined %+v", tx)
	}
	r.idle(t)
	if n := len(r.hook.events()); n != 1 {
		t.Fatalf("a declined payment sent an event (%d events)", n)
	}
	_, err = r.client.VerifyTransaction(ctx, "no-such-reference")
	if !paystack.IsNotFound(err) {
		t.Fatalf("unknown reference: %v", err)
	}
}

func TestBanksAndResolution(t *testing.T) {
	r := start(t, nil)
	ctx := context.Background()
	banks, err := r.client.ListBanks(ctx, "NGN")
	if err != nil {
		t.Fatal(err)
	}
	if len(banks) < 20 || len(banks) != len(reference.Banks) {
		t.Fatalf("%d banks", len(banks))
	}
	for i, b := range banks {
		if want := reference.Banks[i]; b.Name != want.Name || b.Code != want.Code || b.NIPCode != want.NIPCode || b.Slug == "" {
			t.Errorf("bank %+v, want %+v", b, want)
		}
	}
	acct := validAccount(t, "012345678")
	got, err := r.client.ResolveAccount(ctx, acct, "058")
	if err != nil {
		t.Fatal(err)
	}
	if want := reference.TestAccountName("058", acct); got.AccountName != want || got.AccountNumber != acct {
		t.Fatalf("resolved %+v, want %s", got, want)
	}
	if again := must(r.client.ResolveAccount(ctx, acct, "000013")); again.AccountName != got.AccountName {
		t.Fatalf("the NIP code names another holder: %+v", again)
	}
	for _, c := range []struct{ acct, bank string }{
		{validAccount(t, "012349999")[:6] + "9999", "058"}, // ends in 9999: never resolves
		{"0123456780", "058"},                              // wrong check digit
		{acct, "999"},                                      // no such bank
		{"12345", "058"},
	} {
		_, err := r.client.ResolveAccount(ctx, c.acct, c.bank)
		var ae *paystack.APIError
		if !errors.As(err, &ae) || ae.HTTPStatus != http.StatusUnprocessableEntity {
			t.Errorf("resolve %s at %s: %v", c.acct, c.bank, err)
		}
	}
}
