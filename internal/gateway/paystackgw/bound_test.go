package paystackgw

import (
	"context"
	"errors"
	"testing"

	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/domain/reference"
	"github.com/escrowd/escrowd/internal/gateway"
	"github.com/escrowd/escrowd/internal/paystack"
	"github.com/escrowd/escrowd/internal/paystack/paystacksim"
)

// TestBoundToThePaystackClient: the gateways over the real HTTP client and
// the Paystack simulator: an account resolves to the bank's name and an
// unknown one is refused, a recipient is registered, a transfer whose
// answer is lost is paid once (pending until it settles), however often it
// is sent,
// and its status follows the provider's.
func TestBoundToThePaystackClient(t *testing.T) {
	const key = "sk_test_bound"
	sim, err := paystacksim.Start(paystacksim.Config{SecretKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	if err := sim.AutoSettleTransfers("", 0); err != nil { // settled by the test
		t.Fatal(err)
	}
	set, err := New(Config{SecretKey: key, BaseURL: sim.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	account := "0123456785"
	name, err := set.Accounts.Resolve(ctx, "058", account)
	if err != nil || name != reference.TestAccountName("058", account) {
		t.Fatalf("resolve: %q, %v", name, err)
	}
	if _, err := set.Accounts.Resolve(ctx, "058", "0123459999"); !errors.Is(err, gateway.ErrAccountUnresolved) {
		t.Fatalf("an account the bank does not know: %v", err)
	}
	details := ledger.WithdrawalDetails{AccountNumber: account, BankCode: "058", AccountName: name}
	rcp, err := set.Recipients.Recipient(ctx, details)
	if err != nil || rcp == "" {
		t.Fatalf("recipient %q, %v", rcp, err)
	}
	w := ledger.Record{ID: "01a2b3c4d5e6f708090a0b0c", Amount: money.Naira(1500), Type: ledger.Withdrawal, WithdrawalDetails: &details}
	// The answer is lost: the client asks again under the same reference,
	// the duplicate refusal is read back, and the payout is pending; a send
	// after that (a resumer's) changes nothing.
	sim.DropAnswer(paystack.OpInitiateTransfer, 1)
	for i := range 2 {
		got, err := set.Payouts.Send(ctx, w, rcp)
		if err != nil || got.Status != payment.ProviderPending {
			t.Fatalf("send %d: %+v, %v", i, got, err)
		}
	}
	if n := len(sim.Transfers()); n != 1 {
		t.Fatalf("%d transfers for one withdrawal", n)
	}
	if got, err := set.Payouts.Status(ctx, w); err != nil || got.Status != payment.ProviderPending {
		t.Fatalf("status while pending: %+v, %v", got, err)
	}
	if err := sim.SettleTransfer(set.Payouts.Reference(w), "success"); err != nil {
		t.Fatal(err)
	}
	if got, err := set.Payouts.Status(ctx, w); err != nil || got.Status != payment.ProviderSucceeded {
		t.Fatalf("status once settled: %+v, %v", got, err)
	}
}
