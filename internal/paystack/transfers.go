package paystack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Transfer statuses Paystack answers. pending, otp, queued and received
// are not conclusive; the others are.
const (
	TransferPending   = "pending"
	TransferSuccess   = "success"
	TransferFailed    = "failed"
	TransferReversed  = "reversed"
	TransferOTP       = "otp"
	TransferQueued    = "queued"
	TransferReceived  = "received"
	TransferAbandoned = "abandoned"
	TransferBlocked   = "blocked"
	TransferRejected  = "rejected"
)

// RecipientRequest is POST /transferrecipient.
type RecipientRequest struct {
	// Type is "nuban" (the default) for a Nigerian bank account.
	Type          string         `json:"type"`
	Name          string         `json:"name"`
	AccountNumber string         `json:"account_number"`
	BankCode      string         `json:"bank_code"`
	Currency      string         `json:"currency,omitempty"`
	Description   string         `json:"description,omitempty"`
	Metadata      map[string]any `json:"metadata,omitempty"`
}

// Recipient is a bank account transfers can be sent to.
type Recipient struct {
	ID            int64
	RecipientCode string // RCP_…: what a transfer is sent to
	Type          string
	Name          string
	Currency      string
	Active        bool
	AccountNumber string
	AccountName   string
	BankCode      string
	BankName      string
	CreatedAt     time.Time
}

type wireRecipient struct {
	ID            flexInt    `json:"id"`
	RecipientCode flexString `json:"recipient_code"`
	Type          flexString `json:"type"`
	Name          flexString `json:"name"`
	Currency      flexString `json:"currency"`
	Active        bool       `json:"active"`
	CreatedAt     flexTime   `json:"createdAt"`
	CreatedAt2    flexTime   `json:"created_at"`
	Details       struct {
		AccountNumber flexString `json:"account_number"`
		AccountName   flexString `json:"account_name"`
		BankCode      flexString `json:"bank_code"`
		BankName      flexString `json:"bank_name"`
	} `json:"details"`
}

func (w wireRecipient) recipient() Recipient {
	return Recipient{ID: int64(w.ID), RecipientCode: string(w.RecipientCode), Type: string(w.Type), Name: string(w.Name),
		Currency: string(w.Currency), Active: w.Active, AccountNumber: string(w.Details.AccountNumber),
		AccountName: string(w.Details.AccountName), BankCode: string(w.Details.BankCode), BankName: string(w.Details.BankName),
		CreatedAt: either(w.CreatedAt, w.CreatedAt2)}
}

// CreateTransferRecipient registers a bank account to send transfers to.
// It is not retried.
func (c *Client) CreateTransferRecipient(ctx context.Context, r RecipientRequest) (Recipient, error) {
	if r.Type == "" {
		r.Type = "nuban"
	}
	if r.Currency == "" && r.Type == "nuban" {
		r.Currency = "NGN"
	}
	if r.Name == "" || r.AccountNumber == "" || r.BankCode == "" {
		return Recipient{}, fmt.Errorf("paystack %s: name, account number and bank code are required", OpCreateTransferRecipient)
	}
	data, _, err := c.do(ctx, call{op: OpCreateTransferRecipient, method: http.MethodPost, path: "/transferrecipient", body: r})
	if err != nil {
		return Recipient{}, err
	}
	var w wireRecipient
	if err := decodeData(OpCreateTransferRecipient, data, &w); err != nil {
		return Recipient{}, err
	}
	return w.recipient(), nil
}

// TransferRequest is POST /transfer.
type TransferRequest struct {
	// Source is "balance" (the default): the integration's balance.
	Source string `json:"source"`
	// Amount in kobo.
	Amount int64 `json:"amount"`
	// Recipient is the recipient's code (RCP_…).
	Recipient string `json:"recipient"`
	// Reference is required: derive it from the record that pays
	// (TransferReference), so that a repeated call can never pay twice.
	Reference string `json:"reference"`
	Reason    string `json:"reason,omitempty"`
	Currency  string `json:"currency,omitempty"`
}

// TransferRecipient is the recipient as a transfer carries it: the code
// always, the account when Paystack sent it.
type TransferRecipient struct {
	ID            int64
	RecipientCode string
	Name          string
	AccountNumber string
	AccountName   string
	BankCode      string
	BankName      string
}

// Transfer is a payment out of the integration's balance.
type Transfer struct {
	ID              int64
	TransferCode    string
	Reference       string
	Amount          int64 // kobo
	Currency        string
	Status          string
	Reason          string
	Source          string
	Domain          string
	FeeCharged      int64 // kobo, when Paystack reports it
	GatewayResponse string
	Recipient       TransferRecipient
	TransferredAt   time.Time
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

type wireTransfer struct {
	ID              flexInt    `json:"id"`
	TransferCode    flexString `json:"transfer_code"`
	Reference       flexString `json:"reference"`
	Amount          flexInt    `json:"amount"`
	Currency        flexString `json:"currency"`
	Status          flexString `json:"status"`
	Reason          flexString `json:"reason"`
	Source          flexString `json:"source"`
	Domain          flexString `json:"domain"`
	FeeCharged      flexInt    `json:"fee_charged"`
	GatewayResponse flexString `json:"gateway_response"`
	// Recipient is the recipient's id in an initiate answer and the
	// recipient object in verify, listings and events.
	Recipient     json.RawMessage `json:"recipient"`
	TransferredAt flexTime        `json:"transferred_at"`
	CreatedAt     flexTime        `json:"createdAt"`
	CreatedAt2    flexTime        `json:"created_at"`
	UpdatedAt     flexTime        `json:"updatedAt"`
	UpdatedAt2    flexTime        `json:"updated_at"`
}

func (w wireTransfer) transfer() (Transfer, error) {
	t := Transfer{ID: int64(w.ID), TransferCode: string(w.TransferCode), Reference: string(w.Reference),
		Amount: int64(w.Amount), Currency: string(w.Currency), Status: string(w.Status), Reason: string(w.Reason),
		Source: string(w.Source), Domain: string(w.Domain), FeeCharged: int64(w.FeeCharged),
		GatewayResponse: string(w.GatewayResponse), TransferredAt: w.TransferredAt.time(),
		CreatedAt: either(w.CreatedAt, w.CreatedAt2), UpdatedAt: either(w.UpdatedAt, w.UpdatedAt2)}
	raw := bytes.TrimSpace(w.Recipient)
	switch {
	case len(raw) == 0 || string(raw) == "null":
	case raw[0] == '{':
		var r wireRecipient
		if err := json.Unmarshal(raw, &r); err != nil {
			return Transfer{}, err
		}
		t.Recipient = TransferRecipient{ID: int64(r.ID), RecipientCode: string(r.RecipientCode), Name: string(r.Name),
			AccountNumber: string(r.Details.AccountNumber), AccountName: string(r.Details.AccountName),
			BankCode: string(r.Details.BankCode), BankName: string(r.Details.BankName)}
	default:
		var id flexInt
		if err := json.Unmarshal(raw, &id); err != nil {
			return Transfer{}, err
		}
		t.Recipient.ID = int64(id)
	}
	return t, nil
}

func decodeTransfer(op string, data json.RawMessage) (Transfer, error) {
	var w wireTransfer
	if err := decodeData(op, data, &w); err != nil {
		return Transfer{}, err
	}
	t, err := w.transfer()
	if err != nil {
		return Transfer{}, &uncertainError{op: op, cause: fmt.Errorf("answer's recipient not understood: %w", err)}
	}
	return t, nil
}

// InitiateTransfer sends money from the balance to a recipient. It is
// retried on a timeout, a lost answer or a 5xx: Paystack keeps one transfer
// per reference, so a retry cannot pay twice. A retry of a request
// Paystack had already taken is refused as a duplicate
// (IsDuplicateReference): the transfer exists; read it with VerifyTransfer.
// An error wrapping ErrUncertain leaves the transfer's existence unknown:
// verify it by reference, never re-send under another one.
func (c *Client) InitiateTransfer(ctx context.Context, r TransferRequest) (Transfer, error) {
	if r.Source == "" {
		r.Source = "balance"
	}
	if err := CheckTransferReference(r.Reference); err != nil {
		return Transfer{}, fmt.Errorf("paystack %s: %w", OpInitiateTransfer, err)
	}
	if r.Amount <= 0 || r.Recipient == "" {
		return Transfer{}, fmt.Errorf("paystack %s: a positive amount and a recipient are required", OpInitiateTransfer)
	}
	data, _, err := c.do(ctx, call{op: OpInitiateTransfer, method: http.MethodPost, path: "/transfer", body: r, repeatable: true})
	if err != nil {
		return Transfer{}, err
	}
	return decodeTransfer(OpInitiateTransfer, data)
}

// VerifyTransfer reads a transfer by its reference. A reference Paystack
// does not know answers an error for which IsNotFound is true: no
// transfer was made under it.
func (c *Client) VerifyTransfer(ctx context.Context, reference string) (Transfer, error) {
	if reference == "" {
		return Transfer{}, fmt.Errorf("paystack %s: reference is required", OpVerifyTransfer)
	}
	data, _, err := c.do(ctx, call{op: OpVerifyTransfer, method: http.MethodGet,
		path: "/transfer/verify/" + url.PathEscape(reference), repeatable: true})
	if err != nil {
		return Transfer{}, err
	}
	return decodeTransfer(OpVerifyTransfer, data)
}

// ListTransfers lists the integration's transfers, every page.
func (c *Client) ListTransfers(ctx context.Context, p ListParams) ([]Transfer, error) {
	ws, err := listAll(ctx, c, OpListTransfers, "/transfer", p.query(), p.PerPage,
		func(w wireTransfer) string { return strconv.FormatInt(int64(w.ID), 10) })
	if err != nil {
		return nil, err
	}
	out := make([]Transfer, 0, len(ws))
	for _, w := range ws {
		t, err := w.transfer()
		if err != nil {
			return nil, &uncertainError{op: OpListTransfers, cause: fmt.Errorf("answer's recipient not understood: %w", err)}
		}
		out = append(out, t)
	}
	return out, nil
}
