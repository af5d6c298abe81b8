package paystackgw

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/domain/reference"
	"github.com/escrowd/escrowd/internal/gateway"
)

// Client is the part of Paystack's API the payout adapters use, in the
// adapters' own words. A binding of the Paystack HTTP client implements
// it, mapping the client's errors onto ErrUncertain, ErrDuplicateReference
// and ErrNotFound; any other error is a definite refusal by Paystack.
type Client interface {
	// CreateTransferRecipient is POST /transferrecipient, type nuban,
	// currency NGN: the recipient_code.
	CreateTransferRecipient(ctx context.Context, name, accountNumber, bankCode string) (string, error)
	// InitiateTransfer is POST /transfer, source balance, amount in kobo.
	InitiateTransfer(ctx context.Context, t TransferRequest) (Transfer, error)
	// VerifyTransfer is GET /transfer/verify/{reference}.
	VerifyTransfer(ctx context.Context, reference string) (Transfer, error)
	// ResolveAccount is GET /bank/resolve: the account's name.
	ResolveAccount(ctx context.Context, accountNumber, bankCode string) (string, error)
	// ListTransfers is GET /transfer over [from, to), every page.
	ListTransfers(ctx context.Context, from, to time.Time) ([]Transfer, error)
}

// TransferRequest is a transfer to initiate.
type TransferRequest struct {
	Reference string
	Recipient string
	Amount    int64 // kobo
	Reason    string
}

// Transfer is a transfer as Paystack reports it.
type Transfer struct {
	Reference    string
	TransferCode string
	Status       string
	Amount       int64
	Reason       string // Paystack's words for a failure, when it gives any
}

// Errors a Client binding maps Paystack's answers onto.
var (
	// ErrUncertain: a timeout, a 5xx or a lost answer: the outcome is
	// unknown.
	ErrUncertain = errors.New("paystack: the outcome is unknown")
	// ErrDuplicateReference: a transfer with this reference exists.
	ErrDuplicateReference = errors.New("paystack: duplicate transfer reference")
	// ErrNotFound: Paystack knows no such transfer or account.
	ErrNotFound = errors.New("paystack: not found")
)

// Payouts pays bank withdrawals out by Paystack transfers. Every send of
// one withdrawal uses one reference (Reference, from the record id), so a
// send repeated after a lost answer is refused as a duplicate and read
// back: a withdrawal is paid once however often it is sent.
type Payouts struct {
	Client Client
	// TransferReference derives a transfer's reference from a record id,
	// in Paystack's alphabet.
	TransferReference func(recordID string) string
}

var (
	_ gateway.Payouts    = Payouts{}
	_ gateway.Recipients = Payouts{}
	_ gateway.Accounts   = Payouts{}
	_ gateway.Transfers  = Payouts{}
)

// Transfers lists Paystack's transfers of the period.
func (p Payouts) Transfers(ctx context.Context, from, to time.Time) ([]gateway.ProviderTransfer, error) {
	ts, err := p.Client.ListTransfers(ctx, from, to)
	if err != nil {
		return nil, err
	}
	out := make([]gateway.ProviderTransfer, 0, len(ts))
	for _, t := range ts {
		out = append(out, gateway.ProviderTransfer{Reference: t.Reference, Amount: money.Amount(t.Amount),
			Answer: payment.PayoutAnswer{Status: TransferStatus(t.Status), Reason: t.Reason, Transfer: t.TransferCode}})
	}
	return out, nil
}

func (p Payouts) Reference(w ledger.Record) string { return p.TransferReference(w.ID) }

// Send initiates the transfer, or reads back the one a previous send made.
func (p Payouts) Send(ctx context.Context, w ledger.Record, recipient string) (payment.PayoutAnswer, error) {
	if w.WithdrawalDetails == nil {
		return payment.PayoutAnswer{Status: payment.ProviderFailed, Reason: "Paystack pays bank accounts only"}, nil
	}
	if recipient == "" {
		return payment.PayoutAnswer{}, errors.New("paystack: a transfer needs a recipient")
	}
	ref := p.Reference(w)
	t, err := p.Client.InitiateTransfer(ctx, TransferRequest{Reference: ref, Recipient: recipient,
		Amount: w.Amount.Kobo(), Reason: w.Narration})
	switch {
	case errors.Is(err, ErrDuplicateReference):
		return p.Status(ctx, w)
	case errors.Is(err, ErrUncertain):
		return payment.PayoutAnswer{}, err
	case err != nil:
		// Refused. Were an earlier send's transfer to exist (its answer
		// lost), this refusal would not be its outcome: only a reference
		// Paystack knows nothing of makes the refusal final.
		got, verr := p.Status(ctx, w)
		if verr != nil || got.Status != payment.ProviderUnknown {
			return got, verr
		}
		return payment.PayoutAnswer{Status: payment.ProviderFailed, Reason: err.Error()}, nil
	}
	return answer(t, w)
}

// Status verifies the transfer of w.
func (p Payouts) Status(ctx context.Context, w ledger.Record) (payment.PayoutAnswer, error) {
	t, err := p.Client.VerifyTransfer(ctx, p.Reference(w))
	switch {
	case errors.Is(err, ErrNotFound):
		return payment.PayoutAnswer{Status: payment.ProviderUnknown}, nil
	case err != nil:
		return payment.PayoutAnswer{}, err
	}
	return answer(t, w)
}

// answer reads a transfer of w. A transfer that is not w's (another
// reference, another amount) answers nothing: it is not to be believed.
func answer(t Transfer, w ledger.Record) (payment.PayoutAnswer, error) {
	if t.Amount != 0 && t.Amount != w.Amount.Kobo() {
		return payment.PayoutAnswer{}, fmt.Errorf("paystack: transfer %s is of %d kobo, the withdrawal of %d", t.Reference, t.Amount, w.Amount.Kobo())
	}
	return payment.PayoutAnswer{Status: TransferStatus(t.Status), Reason: t.Reason, Transfer: t.TransferCode}, nil
}

// TransferStatus reads Paystack's status of a transfer.
func TransferStatus(s string) payment.ProviderStatus {
	switch s {
	case "success":
		return payment.ProviderSucceeded
	case "failed", "abandoned", "blocked", "rejected":
		return payment.ProviderFailed
	case "reversed":
		return payment.ProviderReversed
	case "pending", "queued", "received", "otp", "processing":
		return payment.ProviderPending
	}
	return payment.ProviderUnknown
}

// Recipient registers the account as a nuban recipient, under its
// resolved name and its bank's CBN code.
func (p Payouts) Recipient(ctx context.Context, to ledger.WithdrawalDetails) (string, error) {
	return p.Client.CreateTransferRecipient(ctx, to.AccountName, to.AccountNumber, bankCode(to.BankCode))
}

// Resolve asks the bank the account's name.
func (p Payouts) Resolve(ctx context.Context, code, accountNumber string) (string, error) {
	name, err := p.Client.ResolveAccount(ctx, accountNumber, bankCode(code))
	if errors.Is(err, ErrNotFound) {
		return "", gateway.ErrAccountUnresolved
	}
	return name, err
}

// bankCode is the CBN code Paystack names a bank by, for either of its
// codes.
func bankCode(code string) string {
	if b, ok := reference.FindBank(code); ok {
		return b.Code
	}
	return code
}
