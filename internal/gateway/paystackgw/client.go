package paystackgw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/escrowd/escrowd/internal/gateway"
	"github.com/escrowd/escrowd/internal/paystack"
)

// Config is one environment's Paystack configuration.
type Config struct {
	SecretKey string
	// BaseURL is Paystack's API (https://api.paystack.co; tests and
	// trials point it at a simulator).
	BaseURL string
	// DVABank is the preferred_bank of customers' dedicated accounts.
	DVABank string
	// Logger and Observe are the client's (a log line and a metric per
	// provider error; either may be nil).
	Logger  *slog.Logger
	Observe func(op string, status int, err error, d time.Duration)
}

// NewClient binds the Paystack HTTP client (internal/paystack) to Client,
// and returns the transfer reference derivation of the provider's
// alphabet with it.
func NewClient(cfg Config) (Client, func(recordID string) string, error) {
	if cfg.SecretKey == "" {
		return nil, nil, errors.New("paystack: no secret key")
	}
	base := cfg.BaseURL
	if base == "" {
		base = paystack.DefaultBaseURL
	}
	return bound{c: paystack.New(paystack.Config{BaseURL: base, SecretKey: cfg.SecretKey, Logger: cfg.Logger, Observe: cfg.Observe})},
		paystack.TransferReference, nil
}

// bound is Client over the Paystack HTTP client, its errors mapped onto
// the ones Payouts decides on.
type bound struct{ c *paystack.Client }

func (b bound) CreateTransferRecipient(ctx context.Context, name, accountNumber, bankCode string) (string, error) {
	r, err := b.c.CreateTransferRecipient(ctx, paystack.RecipientRequest{Type: "nuban", Name: name,
		AccountNumber: accountNumber, BankCode: bankCode, Currency: "NGN"})
	return r.RecipientCode, mapError(err)
}

func (b bound) InitiateTransfer(ctx context.Context, t TransferRequest) (Transfer, error) {
	tr, err := b.c.InitiateTransfer(ctx, paystack.TransferRequest{Source: "balance", Amount: t.Amount,
		Recipient: t.Recipient, Reference: t.Reference, Reason: t.Reason, Currency: "NGN"})
	return transferOf(tr), mapError(err)
}

func (b bound) VerifyTransfer(ctx context.Context, reference string) (Transfer, error) {
	tr, err := b.c.VerifyTransfer(ctx, reference)
	return transferOf(tr), mapError(err)
}

func (b bound) ResolveAccount(ctx context.Context, accountNumber, bankCode string) (string, error) {
	acct, err := b.c.ResolveAccount(ctx, accountNumber, bankCode)
	var apiErr *paystack.APIError
	if errors.As(err, &apiErr) && apiErr.HTTPStatus >= 400 && apiErr.HTTPStatus < 500 && apiErr.HTTPStatus != 401 && apiErr.HTTPStatus != 429 {
		// The bank does not know the account (Paystack answers 422 "Could
		// not resolve account name", or 400 for a malformed one).
		return "", ErrNotFound
	}
	return acct.AccountName, mapError(err)
}

func (b bound) ListTransfers(ctx context.Context, from, to time.Time) ([]Transfer, error) {
	list, err := b.c.ListTransfers(ctx, paystack.ListParams{From: from, To: to})
	if err != nil {
		return nil, mapError(err)
	}
	out := make([]Transfer, 0, len(list))
	for _, tr := range list {
		// The listing's bounds are inclusive days; the caller's to is not.
		if !tr.CreatedAt.IsZero() && (tr.CreatedAt.Before(from) || !tr.CreatedAt.Before(to)) {
			continue
		}
		out = append(out, transferOf(tr))
	}
	return out, nil
}

func transferOf(t paystack.Transfer) Transfer {
	return Transfer{Reference: t.Reference, TransferCode: t.TransferCode, Status: t.Status, Amount: t.Amount, Reason: t.Reason}
}

// mapError maps the client's errors onto ErrUncertain (the outcome is not
// known: a timeout, a 5xx, a lost answer, an answer that cannot be read),
// ErrDuplicateReference and ErrNotFound; any other error is a definite
// refusal, kept as it is (Payouts checks a refused transfer with verify
// before it calls it failed). ErrUnreachable (nothing was sent) stays a
// plain error: nothing happened.
func mapError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, paystack.ErrUncertain):
		return fmt.Errorf("%w: %v", ErrUncertain, err)
	case paystack.IsDuplicateReference(err):
		return fmt.Errorf("%w: %v", ErrDuplicateReference, err)
	case paystack.IsNotFound(err):
		return fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	return err
}

// New is an environment's gateways on Paystack: collections (dedicated
// accounts, card, bank and USSD payments), bank payouts, recipients,
// account resolution and inbound events.
func New(cfg Config) (gateway.Set, error) {
	if cfg.SecretKey == "" {
		return gateway.Set{}, errors.New("paystack: no secret key")
	}
	base := cfg.BaseURL
	if base == "" {
		base = paystack.DefaultBaseURL
	}
	c := paystack.New(paystack.Config{BaseURL: base, SecretKey: cfg.SecretKey, Logger: cfg.Logger, Observe: cfg.Observe})
	set := Gateways(cfg, bound{c: c}, paystack.TransferReference)
	set.Charges = Charges{Client: c, DVABank: cfg.DVABank}
	return set, nil
}

// Gateways is the set over a bound client.
func Gateways(cfg Config, client Client, transferReference func(string) string) gateway.Set {
	p := Payouts{Client: client, TransferReference: transferReference}
	return gateway.Set{Payouts: p, Recipients: p, Accounts: p, Transfers: p, Events: Events{SecretKey: cfg.SecretKey}}
}
