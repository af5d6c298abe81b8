package paystack

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// CustomerRequest is POST /customer.
type CustomerRequest struct {
	Email     string         `json:"email"`
	FirstName string         `json:"first_name,omitempty"`
	LastName  string         `json:"last_name,omitempty"`
	Phone     string         `json:"phone,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

// Customer is a Paystack customer.
type Customer struct {
	ID           int64
	CustomerCode string // CUS_…: what a dedicated account is created for
	Email        string
	FirstName    string
	LastName     string
	Phone        string
	CreatedAt    time.Time
}

type wireCustomer struct {
	ID           flexInt    `json:"id"`
	CustomerCode flexString `json:"customer_code"`
	Email        flexString `json:"email"`
	FirstName    flexString `json:"first_name"`
	LastName     flexString `json:"last_name"`
	Phone        flexString `json:"phone"`
	CreatedAt    flexTime   `json:"createdAt"`
	CreatedAt2   flexTime   `json:"created_at"`
}

func (w wireCustomer) customer() Customer {
	return Customer{ID: int64(w.ID), CustomerCode: string(w.CustomerCode), Email: string(w.Email),
		FirstName: string(w.FirstName), LastName: string(w.LastName), Phone: string(w.Phone),
		CreatedAt: either(w.CreatedAt, w.CreatedAt2)}
}

// CreateCustomer creates (or, for an email Paystack already knows, returns)
// a customer. It is not retried: a repeated call is harmless but Paystack
// does not promise it.
func (c *Client) CreateCustomer(ctx context.Context, r CustomerRequest) (Customer, error) {
	if r.Email == "" {
		return Customer{}, fmt.Errorf("paystack %s: email is required", OpCreateCustomer)
	}
	data, _, err := c.do(ctx, call{op: OpCreateCustomer, method: http.MethodPost, path: "/customer", body: r})
	if err != nil {
		return Customer{}, err
	}
	var w wireCustomer
	if err := decodeData(OpCreateCustomer, data, &w); err != nil {
		return Customer{}, err
	}
	return w.customer(), nil
}

// DedicatedAccountRequest is POST /dedicated_account.
type DedicatedAccountRequest struct {
	// Customer is the customer's code (CUS_…) or id.
	Customer string `json:"customer"`
	// PreferredBank is the provider's slug: "wema-bank", "titan-paystack",
	// or "test-bank" with a test key.
	PreferredBank string `json:"preferred_bank,omitempty"`
	FirstName     string `json:"first_name,omitempty"`
	LastName      string `json:"last_name,omitempty"`
	Phone         string `json:"phone,omitempty"`
}

// DedicatedAccount is a bank account number reserved for one customer:
// every transfer into it arrives as a transaction with channel
// dedicated_nuban.
type DedicatedAccount struct {
	ID            int64
	AccountName   string
	AccountNumber string
	BankName      string
	BankSlug      string
	BankID        int64
	Currency      string
	Active        bool
	Assigned      bool
	CustomerCode  string
	CreatedAt     time.Time
}

type wireDedicatedAccount struct {
	ID   flexInt `json:"id"`
	Bank struct {
		ID   flexInt    `json:"id"`
		Name flexString `json:"name"`
		Slug flexString `json:"slug"`
	} `json:"bank"`
	AccountName   flexString   `json:"account_name"`
	AccountNumber flexString   `json:"account_number"`
	Currency      flexString   `json:"currency"`
	Active        bool         `json:"active"`
	Assigned      bool         `json:"assigned"`
	Customer      wireCustomer `json:"customer"`
	CreatedAt     flexTime     `json:"created_at"`
	CreatedAt2    flexTime     `json:"createdAt"`
}

// CreateDedicatedAccount reserves a dedicated account for a customer. It
// is not retried.
func (c *Client) CreateDedicatedAccount(ctx context.Context, r DedicatedAccountRequest) (DedicatedAccount, error) {
	if r.Customer == "" {
		return DedicatedAccount{}, fmt.Errorf("paystack %s: customer is required", OpCreateDedicatedAccount)
	}
	data, _, err := c.do(ctx, call{op: OpCreateDedicatedAccount, method: http.MethodPost, path: "/dedicated_account", body: r})
	if err != nil {
		return DedicatedAccount{}, err
	}
	var w wireDedicatedAccount
	if err := decodeData(OpCreateDedicatedAccount, data, &w); err != nil {
		return DedicatedAccount{}, err
	}
	return DedicatedAccount{ID: int64(w.ID), AccountName: string(w.AccountName), AccountNumber: string(w.AccountNumber),
		BankName: string(w.Bank.Name), BankSlug: string(w.Bank.Slug), BankID: int64(w.Bank.ID),
		Currency: string(w.Currency), Active: w.Active, Assigned: w.Assigned,
		CustomerCode: string(w.Customer.CustomerCode), CreatedAt: either(w.CreatedAt, w.CreatedAt2)}, nil
}

// decodeData reads an answer's data into v. A 2xx whose data cannot be
// read is an answer whose meaning is unknown.
func decodeData(op string, data json.RawMessage, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return &uncertainError{op: op, cause: fmt.Errorf("answer's data not understood: %w", err)}
	}
	return nil
}
