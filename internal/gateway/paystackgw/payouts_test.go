package paystackgw

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/internal/gateway"
)

// fakeClient keeps transfers by reference as Paystack does; initiate's
// answer can be replaced by an error after (lost) or instead of (refused)
// creating the transfer.
type fakeClient struct {
	transfers map[string]Transfer
	lost      bool  // create, then answer ErrUncertain
	refuse    error // refuse without creating
	status    string
	initiated int
	lastBank  string
}

func (f *fakeClient) CreateTransferRecipient(_ context.Context, name, account, bank string) (string, error) {
	f.lastBank = bank
	return "RCP_" + account, nil
}

func (f *fakeClient) InitiateTransfer(_ context.Context, t TransferRequest) (Transfer, error) {
	f.initiated++
	if _, ok := f.transfers[t.Reference]; ok {
		return Transfer{}, ErrDuplicateReference
	}
	if f.refuse != nil {
		return Transfer{}, f.refuse
	}
	tr := Transfer{Reference: t.Reference, TransferCode: "TRF_1", Status: f.status, Amount: t.Amount}
	f.transfers[t.Reference] = tr
	if f.lost {
		f.lost = false
		return Transfer{}, ErrUncertain
	}
	return tr, nil
}

func (f *fakeClient) VerifyTransfer(_ context.Context, ref string) (Transfer, error) {
	t, ok := f.transfers[ref]
	if !ok {
		return Transfer{}, ErrNotFound
	}
	return t, nil
}

func (f *fakeClient) ResolveAccount(_ context.Context, account, bank string) (string, error) {
	f.lastBank = bank
	if account == "0000000000" {
		return "", ErrNotFound
	}
	return "ADA OBI", nil
}

func (f *fakeClient) ListTransfers(context.Context, time.Time, time.Time) ([]Transfer, error) {
	var out []Transfer
	for _, t := range f.transfers {
		out = append(out, t)
	}
	return out, nil
}

func withdrawal() ledger.Record {
	return ledger.Record{ID: "rec-1", Amount: money.Naira(1000), Type: ledger.Withdrawal,
		WithdrawalDetails: &ledger.WithdrawalDetails{AccountNumber: "0123456785", BankCode: "058", AccountName: "ADA OBI"}}
}

func payouts(c *fakeClient) Payouts {
	return Payouts{Client: c, TransferReference: func(id string) string { return "wd_" + id }}
}

func TestSendIsPaidOnce(t *testing.T) {
	ctx := context.Background()
	c := &fakeClient{transfers: map[string]Transfer{}, status: "otp", lost: true}
	p := payouts(c)
	if _, err := p.Send(ctx, withdrawal(), "RCP_1"); !errors.Is(err, ErrUncertain) {
		t.Fatalf("lost answer: %v", err)
	}
	got, err := p.Send(ctx, withdrawal(), "RCP_1")
	if err != nil || got.Status != payment.ProviderPending || got.Transfer != "TRF_1" {
		t.Fatalf("send again: %+v, %v", got, err)
	}
	if len(c.transfers) != 1 || c.initiated != 2 {
		t.Fatalf("%d transfers from %d initiations", len(c.transfers), c.initiated)
	}
	c.transfers["wd_rec-1"] = Transfer{Reference: "wd_rec-1", Status: "reversed", Amount: 100000}
	if got, err := p.Status(ctx, withdrawal()); err != nil || got.Status != payment.ProviderReversed {
		t.Fatalf("status: %+v, %v", got, err)
	}
}

func TestSendRefused(t *testing.T) {
	ctx := context.Background()
	c := &fakeClient{transfers: map[string]Transfer{}, refuse: errors.New("Your balance is not enough to fulfil this request")}
	got, err := payouts(c).Send(ctx, withdrawal(), "RCP_1")
	if err != nil || got.Status != payment.ProviderFailed || got.Reason == "" {
		t.Fatalf("refused: %+v, %v", got, err)
	}
	// A refusal while a transfer exists under the reference (an earlier
	// send whose answer was lost) is not the payout's outcome.
	c.transfers["wd_rec-1"] = Transfer{Reference: "wd_rec-1", Status: "success", Amount: 100000}
	c.refuse = errors.New("Too many requests")
	p := Payouts{Client: refusing{c}, TransferReference: func(id string) string { return "wd_" + id }}
	if got, err := p.Send(ctx, withdrawal(), "RCP_1"); err != nil || got.Status != payment.ProviderSucceeded {
		t.Fatalf("refused with a transfer standing: %+v, %v", got, err)
	}
}

// refusing refuses every initiation, whatever exists.
type refusing struct{ *fakeClient }

func (r refusing) InitiateTransfer(context.Context, TransferRequest) (Transfer, error) {
	return Transfer{}, r.refuse
}

func TestStatusOfAnotherAmountIsNotBelieved(t *testing.T) {
	c := &fakeClient{transfers: map[string]Transfer{"wd_rec-1": {Reference: "wd_rec-1", Status: "success", Amount: 1}}}
	if _, err := payouts(c).Status(context.Background(), withdrawal()); err == nil {
		t.Fatal("a transfer of another amount was believed")
	}
	c.transfers = map[string]Transfer{}
	if got, err := payouts(c).Status(context.Background(), withdrawal()); err != nil || got.Status != payment.ProviderUnknown {
		t.Fatalf("no transfer: %+v, %v", got, err)
	}
}

func TestTransferStatus(t *testing.T) {
	for s, want := range map[string]payment.ProviderStatus{
		"success": payment.ProviderSucceeded, "failed": payment.ProviderFailed, "reversed": payment.ProviderReversed,
		"pending": payment.ProviderPending, "queued": payment.ProviderPending, "received": payment.ProviderPending,
		"otp": payment.ProviderPending, "abandoned": payment.ProviderFailed, "": payment.ProviderUnknown, "new-status": payment.ProviderUnknown,
	} {
		if got := TransferStatus(s); got != want {
			t.Errorf("%q: %q, want %q", s, got, want)
		}
	}
}

func TestRecipientAndResolve(t *testing.T) {
	ctx := context.Background()
	c := &fakeClient{transfers: map[string]Transfer{}}
	p := payouts(c)
	if code, err := p.Recipient(ctx, *withdrawal().WithdrawalDetails); err != nil || code != "RCP_0123456785" {
		t.Fatalf("recipient %q, %v", code, err)
	}
	if name, err := p.Resolve(ctx, "058", "0123456785"); err != nil || name != "ADA OBI" || c.lastBank != "058" {
		t.Fatalf("resolve %q, %v (bank %q)", name, err, c.lastBank)
	}
	if _, err := p.Resolve(ctx, "058", "0000000000"); !errors.Is(err, gateway.ErrAccountUnresolved) {
		t.Fatalf("unknown account: %v", err)
	}
}
