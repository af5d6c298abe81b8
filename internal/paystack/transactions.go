package paystack

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Transaction statuses Paystack answers.
const (
	TransactionSuccess    = "success"
	TransactionFailed     = "failed"
	TransactionAbandoned  = "abandoned"
	TransactionOngoing    = "ongoing"
	TransactionPending    = "pending"
	TransactionReversed   = "reversed"
	TransactionQueued     = "queued"
	TransactionProcessing = "processing"
)

// Transaction channels.
const (
	ChannelCard           = "card"
	ChannelBank           = "bank"
	ChannelUSSD           = "ussd"
	ChannelBankTransfer   = "bank_transfer"
	ChannelDedicatedNUBAN = "dedicated_nuban"
)

// InitializeRequest is POST /transaction/initialize.
type InitializeRequest struct {
	Email string `json:"email"`
	// Amount in kobo.
	Amount int64 `json:"amount"`
	// Reference is ours; with it the request is safe to retry.
	Reference   string         `json:"reference,omitempty"`
	CallbackURL string         `json:"callback_url,omitempty"`
	Channels    []string       `json:"channels,omitempty"`
	Currency    string         `json:"currency,omitempty"`
	Metadata    map[string]any `json:"metadata,omitempty"`
}

// Authorization is what initializing a transaction answers: the page the
// payer completes the payment on.
type Authorization struct {
	AuthorizationURL string
	AccessCode       string
	Reference        string
}

// TransactionCustomer is the customer of a transaction.
type TransactionCustomer struct {
	ID           int64
	Email        string
	CustomerCode string
	FirstName    string
	LastName     string
}

// PaymentAuthorization is how a transaction was paid: the card, or for a
// bank transfer the sending and receiving accounts.
type PaymentAuthorization struct {
	AuthorizationCode string
	Channel           string
	CardType          string
	Bank              string
	Brand             string
	Last4             string
	CountryCode       string
	Reusable          bool
	AccountName       string
	// Of a transfer into an account (dedicated_nuban, bank_transfer).
	SenderBank                string
	SenderBankAccountNumber   string
	SenderName                string
	Narration                 string
	ReceiverBank              string
	ReceiverBankAccountNumber string
}

// Transaction is a payment into the integration.
type Transaction struct {
	ID              int64
	Status          string
	Reference       string
	Amount          int64 // kobo
	RequestedAmount int64 // kobo
	Fees            int64 // kobo, Paystack's fee
	Currency        string
	Channel         string
	GatewayResponse string
	Domain          string // "test" or "live"
	PaidAt          time.Time
	CreatedAt       time.Time
	Customer        TransactionCustomer
	Authorization   PaymentAuthorization
	// ReceiverAccountNumber is, for a transfer into a dedicated account, the
	// dedicated account's number: from authorization
	// receiver_bank_account_number, or metadata receiver_account_number
	// where older answers put it.
	ReceiverAccountNumber string
	ReceiverBank          string
	// Metadata is the transaction's metadata as Paystack sent it (an
	// object, a string or null).
	Metadata json.RawMessage
}

type wireTransaction struct {
	ID              flexInt         `json:"id"`
	Domain          flexString      `json:"domain"`
	Status          flexString      `json:"status"`
	Reference       flexString      `json:"reference"`
	Amount          flexInt         `json:"amount"`
	RequestedAmount flexInt         `json:"requested_amount"`
	Fees            flexInt         `json:"fees"`
	Currency        flexString      `json:"currency"`
	Channel         flexString      `json:"channel"`
	GatewayResponse flexString      `json:"gateway_response"`
	PaidAt          flexTime        `json:"paid_at"`
	PaidAt2         flexTime        `json:"paidAt"`
	CreatedAt       flexTime        `json:"created_at"`
	CreatedAt2      flexTime        `json:"createdAt"`
	Metadata        json.RawMessage `json:"metadata"`
	Customer        struct {
		ID           flexInt    `json:"id"`
		Email        flexString `json:"email"`
		CustomerCode flexString `json:"customer_code"`
		FirstName    flexString `json:"first_name"`
		LastName     flexString `json:"last_name"`
	} `json:"customer"`
	Authorization struct {
		AuthorizationCode         flexString `json:"authorization_code"`
		Channel                   flexString `json:"channel"`
		CardType                  flexString `json:"card_type"`
		Bank                      flexString `json:"bank"`
		Brand                     flexString `json:"brand"`
		Last4                     flexString `json:"last4"`
		CountryCode               flexString `json:"country_code"`
		Reusable                  bool       `json:"reusable"`
		AccountName               flexString `json:"account_name"`
		SenderBank                flexString `json:"sender_bank"`
		SenderBankAccountNumber   flexString `json:"sender_bank_account_number"`
		SenderName                flexString `json:"sender_name"`
		Narration                 flexString `json:"narration"`
		ReceiverBank              flexString `json:"receiver_bank"`
		ReceiverBankAccountNumber flexString `json:"receiver_bank_account_number"`
	} `json:"authorization"`
}

func (w wireTransaction) transaction() Transaction {
	a := w.Authorization
	t := Transaction{
		ID: int64(w.ID), Status: string(w.Status), Reference: string(w.Reference),
		Amount: int64(w.Amount), RequestedAmount: int64(w.RequestedAmount), Fees: int64(w.Fees),
		Currency: string(w.Currency), Channel: string(w.Channel), GatewayResponse: string(w.GatewayResponse),
		Domain: string(w.Domain), PaidAt: either(w.PaidAt, w.PaidAt2), CreatedAt: either(w.CreatedAt, w.CreatedAt2),
		Customer: TransactionCustomer{ID: int64(w.Customer.ID), Email: string(w.Customer.Email),
			CustomerCode: string(w.Customer.CustomerCode), FirstName: string(w.Customer.FirstName), LastName: string(w.Customer.LastName)},
		Authorization: PaymentAuthorization{AuthorizationCode: string(a.AuthorizationCode), Channel: string(a.Channel),
			CardType: string(a.CardType), Bank: string(a.Bank), Brand: string(a.Brand), Last4: string(a.Last4),
			CountryCode: string(a.CountryCode), Reusable: a.Reusable, AccountName: string(a.AccountName),
			SenderBank: string(a.SenderBank), SenderBankAccountNumber: string(a.SenderBankAccountNumber),
			SenderName: string(a.SenderName), Narration: string(a.Narration), ReceiverBank: string(a.ReceiverBank),
			ReceiverBankAccountNumber: string(a.ReceiverBankAccountNumber)},
		ReceiverAccountNumber: string(a.ReceiverBankAccountNumber),
		ReceiverBank:          string(a.ReceiverBank),
		Metadata:              w.Metadata,
	}
	if t.ReceiverAccountNumber == "" || t.ReceiverBank == "" {
		m := metadataObject(w.Metadata)
		if t.ReceiverAccountNumber == "" {
			t.ReceiverAccountNumber = m["receiver_account_number"]
		}
		if t.ReceiverBank == "" {
			t.ReceiverBank = m["receiver_bank"]
		}
	}
	return t
}

// metadataObject reads the string fields of a transaction's metadata,
// which Paystack sends as an object, as a string holding one, or empty.
func metadataObject(raw json.RawMessage) map[string]string {
	var obj map[string]flexString
	if json.Unmarshal(raw, &obj) != nil {
		var s string
		if json.Unmarshal(raw, &s) != nil || json.Unmarshal([]byte(s), &obj) != nil {
			return nil
		}
	}
	out := make(map[string]string, len(obj))
	for k, v := range obj {
		out[k] = string(v)
	}
	return out
}

// InitializeTransaction starts a payment the payer completes on the
// answer's AuthorizationURL. With a Reference the request is retried on a
// timeout or a 5xx; a retry Paystack already took may be refused as a
// duplicate (IsDuplicateReference): the transaction then exists, and
// VerifyTransaction reads it.
func (c *Client) InitializeTransaction(ctx context.Context, r InitializeRequest) (Authorization, error) {
	if r.Email == "" || r.Amount <= 0 {
		return Authorization{}, fmt.Errorf("paystack %s: email and a positive amount are required", OpInitializeTransaction)
	}
	data, _, err := c.do(ctx, call{op: OpInitializeTransaction, method: http.MethodPost, path: "/transaction/initialize",
		body: r, repeatable: r.Reference != ""})
	if err != nil {
		return Authorization{}, err
	}
	var w struct {
		AuthorizationURL flexString `json:"authorization_url"`
		AccessCode       flexString `json:"access_code"`
		Reference        flexString `json:"reference"`
	}
	if err := decodeData(OpInitializeTransaction, data, &w); err != nil {
		return Authorization{}, err
	}
	return Authorization{AuthorizationURL: string(w.AuthorizationURL), AccessCode: string(w.AccessCode), Reference: string(w.Reference)}, nil
}

// VerifyTransaction reads a transaction by its reference: Paystack's word
// on its status and amount. A reference Paystack does not know answers an
// error for which IsNotFound is true.
func (c *Client) VerifyTransaction(ctx context.Context, reference string) (Transaction, error) {
	if reference == "" {
		return Transaction{}, fmt.Errorf("paystack %s: reference is required", OpVerifyTransaction)
	}
	data, _, err := c.do(ctx, call{op: OpVerifyTransaction, method: http.MethodGet,
		path: "/transaction/verify/" + url.PathEscape(reference), repeatable: true})
	if err != nil {
		return Transaction{}, err
	}
	var w wireTransaction
	if err := decodeData(OpVerifyTransaction, data, &w); err != nil {
		return Transaction{}, err
	}
	return w.transaction(), nil
}

// ListParams filters a listing. Every page is read.
type ListParams struct {
	// From and To bound the records' creation time (either may be zero).
	From, To time.Time
	// Status keeps the records with that status ("" for all).
	Status string
	// PerPage is the page size asked for (DefaultPerPage when 0).
	PerPage int
}

// DefaultPerPage is a listing's page size.
const DefaultPerPage = 100

// maxPages bounds a listing, against an answer that never ends.
const maxPages = 10000

func (p ListParams) query() url.Values {
	q := url.Values{}
	if !p.From.IsZero() {
		q.Set("from", p.From.UTC().Format(time.RFC3339))
	}
	if !p.To.IsZero() {
		q.Set("to", p.To.UTC().Format(time.RFC3339))
	}
	if p.Status != "" {
		q.Set("status", p.Status)
	}
	return q
}

// ListTransactions lists the integration's transactions, every page.
func (c *Client) ListTransactions(ctx context.Context, p ListParams) ([]Transaction, error) {
	ws, err := listAll(ctx, c, OpListTransactions, "/transaction", p.query(), p.PerPage,
		func(w wireTransaction) string { return strconv.FormatInt(int64(w.ID), 10) })
	if err != nil {
		return nil, err
	}
	out := make([]Transaction, len(ws))
	for i, w := range ws {
		out[i] = w.transaction()
	}
	return out, nil
}

// listAll reads every page of a page-numbered listing. A record that moves
// to the next page while the listing is read (a new one was added in
// front) is kept once, by key.
func listAll[W any](ctx context.Context, c *Client, op, path string, q url.Values, perPage int, key func(W) string) ([]W, error) {
	if perPage <= 0 {
		perPage = DefaultPerPage
	}
	var out []W
	seen := map[string]bool{}
	for page := 1; page <= maxPages; page++ {
		pq := url.Values{}
		for k, v := range q {
			pq[k] = v
		}
		pq.Set("perPage", strconv.Itoa(perPage))
		pq.Set("page", strconv.Itoa(page))
		data, rawMeta, err := c.do(ctx, call{op: op, method: http.MethodGet, path: path, query: pq, repeatable: true})
		if err != nil {
			return nil, err
		}
		var items []W
		if err := decodeData(op, data, &items); err != nil {
			return nil, err
		}
		var meta listMeta
		if len(rawMeta) > 0 && strings.TrimSpace(string(rawMeta)) != "null" {
			if err := decodeData(op, rawMeta, &meta); err != nil {
				return nil, err
			}
		}
		for _, it := range items {
			k := key(it)
			if !seen[k] {
				seen[k] = true
				out = append(out, it)
			}
		}
		switch {
		case len(items) == 0:
			return out, nil
		case meta.PageCount > 0:
			if int64(page) >= int64(meta.PageCount) {
				return out, nil
			}
		case meta.PerPage > 0 && int64(len(items)) < int64(meta.PerPage):
			return out, nil
		case meta.PerPage <= 0 && len(items) < perPage:
			return out, nil
		}
	}
	return nil, fmt.Errorf("paystack %s: more than %d pages", op, maxPages)
}
