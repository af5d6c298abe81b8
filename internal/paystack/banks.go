package paystack

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// Bank is a bank Paystack can send transfers to.
type Bank struct {
	ID   int64
	Name string
	Slug string
	// Code is the bank_code recipients and account resolution take.
	Code string
	// LongCode is the bank's sort code, when Paystack has one.
	LongCode string
	// NIPCode is the bank's NIP institution code, asked for with
	// include_nip_sort_code; empty when Paystack does not send it (the
	// reference table of banks then names it).
	NIPCode          string
	Currency         string
	Country          string
	Type             string
	Active           bool
	SupportsTransfer bool
}

type wireBank struct {
	ID               flexInt    `json:"id"`
	Name             flexString `json:"name"`
	Slug             flexString `json:"slug"`
	Code             flexString `json:"code"`
	LongCode         flexString `json:"longcode"`
	NIPCode          flexString `json:"nip_sort_code"`
	Currency         flexString `json:"currency"`
	Country          flexString `json:"country"`
	Type             flexString `json:"type"`
	Active           bool       `json:"active"`
	IsDeleted        bool       `json:"is_deleted"`
	SupportsTransfer *bool      `json:"supports_transfer"`
}

// ListBanks lists the banks of a currency ("NGN" when empty), every page.
// Deleted banks are left out.
func (c *Client) ListBanks(ctx context.Context, currency string) ([]Bank, error) {
	if currency == "" {
		currency = "NGN"
	}
	q := url.Values{"currency": {currency}, "include_nip_sort_code": {"true"}}
	ws, err := listAll(ctx, c, OpListBanks, "/bank", q, DefaultPerPage,
		func(w wireBank) string { return fmt.Sprintf("%d/%s", w.ID, w.Code) })
	if err != nil {
		return nil, err
	}
	out := make([]Bank, 0, len(ws))
	for _, w := range ws {
		if w.IsDeleted {
			continue
		}
		b := Bank{ID: int64(w.ID), Name: string(w.Name), Slug: string(w.Slug), Code: string(w.Code),
			LongCode: string(w.LongCode), NIPCode: string(w.NIPCode), Currency: string(w.Currency),
			Country: string(w.Country), Type: string(w.Type), Active: w.Active, SupportsTransfer: true}
		if w.SupportsTransfer != nil {
			b.SupportsTransfer = *w.SupportsTransfer
		}
		out = append(out, b)
	}
	return out, nil
}

// ResolvedAccount is the holder of a bank account, as the bank names it.
type ResolvedAccount struct {
	AccountNumber string
	AccountName   string
	BankID        int64
}

// ResolveAccount asks the bank for the name on an account. An account the
// bank does not know is an *APIError (Paystack answers 422 "Could not
// resolve account name…"); no transfer should be sent to it.
func (c *Client) ResolveAccount(ctx context.Context, accountNumber, bankCode string) (ResolvedAccount, error) {
	if accountNumber == "" || bankCode == "" {
		return ResolvedAccount{}, fmt.Errorf("paystack %s: account number and bank code are required", OpResolveAccount)
	}
	q := url.Values{"account_number": {accountNumber}, "bank_code": {bankCode}}
	data, _, err := c.do(ctx, call{op: OpResolveAccount, method: http.MethodGet, path: "/bank/resolve", query: q, repeatable: true})
	if err != nil {
		return ResolvedAccount{}, err
	}
	var w struct {
		AccountNumber flexString `json:"account_number"`
		AccountName   flexString `json:"account_name"`
		BankID        flexInt    `json:"bank_id"`
	}
	if err := decodeData(OpResolveAccount, data, &w); err != nil {
		return ResolvedAccount{}, err
	}
	if w.AccountName == "" {
		return ResolvedAccount{}, &APIError{HTTPStatus: http.StatusOK, Message: "account resolved without a name", Op: OpResolveAccount}
	}
	return ResolvedAccount{AccountNumber: string(w.AccountNumber), AccountName: string(w.AccountName), BankID: int64(w.BankID)}, nil
}
