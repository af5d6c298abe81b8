// Package ledger is the double-entry model every money movement uses: an
// event that moves money carries balanced postings between accounts, so the
// sum over all accounts of a merchant and environment is always zero, and
// the transaction records (what the API shows) that the movement settles.
package ledger

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/money"
)

// Holder is who an account belongs to.
type Holder string

const (
	HolderCustomer Holder = "customer"
	HolderMerchant Holder = "merchant"
	HolderPlatform Holder = "platform" // the service's revenue from this merchant
	HolderExternal Holder = "external" // banks, chains and gateways outside the ledger
)

// Bucket is which balance of a holder an account is.
type Bucket string

const (
	Main     Bucket = "main"
	Escrow   Bucket = "escrow"
	Revenue  Bucket = "revenue"
	Clearing Bucket = "clearing"
	// Cost is what the service pays out of its own pocket for this
	// merchant's money: a payment provider's processing fees.
	Cost Bucket = "cost"
)

// Account is one balance. Customer accounts are named by customer id; the
// merchant, platform and external accounts by merchant id, scoped by the
// movement's environment.
type Account struct {
	Holder Holder `json:"holder"`
	ID     string `json:"id"`
	Bucket Bucket `json:"bucket"`
}

func (a Account) String() string { return string(a.Holder) + ":" + a.ID + ":" + string(a.Bucket) }

// CustomerMain and friends name the accounts.
func CustomerMain(customerID string) Account   { return Account{HolderCustomer, customerID, Main} }
func CustomerEscrow(customerID string) Account { return Account{HolderCustomer, customerID, Escrow} }
func MerchantMain(merchantID string) Account   { return Account{HolderMerchant, merchantID, Main} }
func MerchantEscrow(merchantID string) Account { return Account{HolderMerchant, merchantID, Escrow} }
func PlatformRevenue(merchantID string) Account {
	return Account{HolderPlatform, merchantID, Revenue}
}

// PlatformCost is the service's processing costs of this merchant's
// collections (a provider's fees): it only ever goes down.
func PlatformCost(merchantID string) Account {
	return Account{HolderPlatform, merchantID, Cost}
}
func ExternalClearing(merchantID string) Account {
	return Account{HolderExternal, merchantID, Clearing}
}

// MayGoNegative reports whether the account may hold a negative balance:
// external clearing, which mirrors money that entered or left the ledger,
// and the platform's processing costs, which only accumulate.
func (a Account) MayGoNegative() bool {
	return a.Holder == HolderExternal || a.Holder == HolderPlatform && a.Bucket == Cost
}

// Posting moves Amount from one account to another. A posting is balanced by
// construction: what leaves From arrives in To.
type Posting struct {
	From   Account      `json:"from"`
	To     Account      `json:"to"`
	Amount money.Amount `json:"amount"`
}

// Movement is one atomic money movement within a merchant and environment.
type Movement struct {
	MerchantID  string             `json:"merchantId"`
	Environment domain.Environment `json:"environment"`
	Postings    []Posting          `json:"postings"`
}

// ErrUnbalanced is returned for malformed movements: a programming error,
// never a client one.
var ErrUnbalanced = errors.New("ledger: malformed movement")

// Validate checks that every posting moves a positive amount between two
// different accounts of the movement's merchant.
func (m Movement) Validate() error {
	if m.MerchantID == "" || !m.Environment.Valid() {
		return fmt.Errorf("%w: no merchant or environment", ErrUnbalanced)
	}
	for _, p := range m.Postings {
		if p.Amount <= 0 || p.Amount > money.Max {
			return fmt.Errorf("%w: amount %d from %s to %s", ErrUnbalanced, p.Amount, p.From, p.To)
		}
		if p.From == p.To {
			return fmt.Errorf("%w: %s to itself", ErrUnbalanced, p.From)
		}
		for _, a := range []Account{p.From, p.To} {
			if a.ID == "" {
				return fmt.Errorf("%w: account %s has no id", ErrUnbalanced, a)
			}
			if a.Holder != HolderCustomer && a.ID != m.MerchantID {
				return fmt.Errorf("%w: %s outside merchant %s", ErrUnbalanced, a, m.MerchantID)
			}
		}
	}
	return nil
}

// Deltas returns the net change of every account the movement touches. The
// values always sum to zero.
func (m Movement) Deltas() map[Account]money.Amount {
	d := map[Account]money.Amount{}
	for _, p := range m.Postings {
		d[p.From] -= p.Amount
		d[p.To] += p.Amount
	}
	return d
}

// Customers lists the customer ids whose accounts the movement touches, in
// first-seen order.
func (m Movement) Customers() []string {
	var ids []string
	seen := map[string]bool{}
	for _, p := range m.Postings {
		for _, a := range []Account{p.From, p.To} {
			if a.Holder == HolderCustomer && !seen[a.ID] {
				seen[a.ID] = true
				ids = append(ids, a.ID)
			}
		}
	}
	return ids
}

// Reverse returns the movement that undoes m.
func (m Movement) Reverse() Movement {
	r := Movement{MerchantID: m.MerchantID, Environment: m.Environment}
	for i := len(m.Postings) - 1; i >= 0; i-- {
		p := m.Postings[i]
		r.Postings = append(r.Postings, Posting{From: p.To, To: p.From, Amount: p.Amount})
	}
	return r
}

// Move is a convenience for building postings; zero amounts are dropped so
// callers can pass optional legs (a zero fee) without checks.
func (m *Movement) Move(from, to Account, amount money.Amount) {
	if amount == 0 {
		return
	}
	m.Postings = append(m.Postings, Posting{From: from, To: to, Amount: amount})
}

// Transaction statuses and types of the API's transaction record.
type (
	Status     string
	Type       string
	CreditType string
)

const (
	Pending  Status = "pending"
	Success  Status = "success"
	Failed   Status = "failed"
	Reversed Status = "reversed"
)

// Settled reports whether a record with this status announces itself (a
// payment.* webhook): every status but pending.
func (s Status) Settled() bool { return s == Success || s == Failed || s == Reversed }

const (
	Deposit        Type = "deposit"
	Withdrawal     Type = "withdrawal"
	WalletTransfer Type = "wallet_transfer"
	EscrowPayment  Type = "escrow"
	Commission     Type = "commission"
	Delivery       Type = "delivery"
	EscrowRelease  Type = "escrow_release"
	EscrowRefund   Type = "escrow_refund"
	VaultStake     Type = "vault_stake"
	VaultPayout    Type = "vault_payout"
	VaultRefund    Type = "vault_refund"
	// Refund is part of an open escrow's payment the merchant returns to
	// the buyer before it settles (a partial refund).
	Refund Type = "refund"
)

const (
	Credit CreditType = "credit"
	Debit  CreditType = "debit"
)

// Currency is the only currency wallets hold.
const Currency = "NGN"

// WithdrawalDetails is a bank payout's destination.
type WithdrawalDetails struct {
	AccountName   string `json:"accountName"`
	AccountNumber string `json:"accountNumber"`
	BankCode      string `json:"bankCode"`
	BankName      string `json:"bankName"`
	Narration     string `json:"narration"`
}

// BlockchainDetails is a crypto payout's destination.
type BlockchainDetails struct {
	ToAddress string `json:"toAddress"`
	Network   string `json:"network"`
}

// WalletDetails names the other side of a wallet transfer.
type WalletDetails struct {
	Phone        string `json:"phone"`
	Narration    string `json:"narration"`
	CustomerID   string `json:"customerId"`             // the counterparty
	CustomerName string `json:"customerName,omitempty"` // the counterparty's name
}

// EscrowDetails names the escrows a record pays or settles. A payment
// that funds escrows also describes them: one escrow in
// the flat fields, several in Escrows, one object each.
type EscrowDetails struct {
	EscrowIDs     []string `json:"escrowIds"`
	PaymentTokens []string `json:"paymentTokens,omitempty"`
	EscrowSummary
	Escrows []EscrowSummary `json:"escrows,omitempty"`
}

// EscrowSummary describes a funded escrow as clients of the public API
// read it: its token, purpose, amount, fee and who is paid when it
// settles.
type EscrowSummary struct {
	PaymentToken string        `json:"paymentToken,omitempty"`
	Purpose      string        `json:"purpose,omitempty"`
	Amount       *money.Amount `json:"amount,omitempty"`
	Fee          *money.Amount `json:"fee,omitempty"`
	Beneficiary  *Beneficiary  `json:"beneficiary,omitempty"`
}

// Beneficiary is who an escrow pays: the seller (a customer, or the
// merchant selling as itself, which has no phone).
type Beneficiary struct {
	Name  string `json:"name"`
	Phone string `json:"phone"`
}

// FundedEscrowDetails are the escrow details of a payment that funded the
// escrows ids, with their tokens and summaries in the same order.
func FundedEscrowDetails(ids, tokens []string, summaries []EscrowSummary) *EscrowDetails {
	d := &EscrowDetails{EscrowIDs: ids, PaymentTokens: tokens}
	if len(summaries) == 1 {
		d.EscrowSummary = summaries[0]
	} else {
		d.Escrows = summaries
	}
	return d
}

// Record is a transaction record: one line of a customer's history or of
// the merchant's ledger. CustomerID is empty on the merchant's records.
type Record struct {
	ID                string             `json:"id"`
	Reference         string             `json:"reference"`
	Amount            money.Amount       `json:"amount"`
	Fee               money.Amount       `json:"fee"`
	Currency          string             `json:"currency"`
	Status            Status             `json:"status"`
	Type              Type               `json:"transactionType"`
	CreditType        CreditType         `json:"creditType"`
	CustomerID        string             `json:"customerId"` // "" on the merchant's records
	MerchantID        string             `json:"merchantId"`
	Environment       domain.Environment `json:"environment"`
	Narration         string             `json:"narration"`
	EscrowDetails     *EscrowDetails     `json:"escrowDetails,omitempty"`
	WithdrawalDetails *WithdrawalDetails `json:"withdrawalDetails,omitempty"`
	WalletDetails     *WalletDetails     `json:"walletDetails,omitempty"`
	BlockchainDetails *BlockchainDetails `json:"blockchainDetails,omitempty"`
	CreatedAt         time.Time          `json:"createdAt"`
	UpdatedAt         time.Time          `json:"updatedAt"`
}

// Effect is what a money event means to the ledger's readers: the movement
// it makes (if any) and the transaction records it creates or updates
// (whole records: a reader upserts them by id).
type Effect struct {
	Movement *Movement
	Records  []Record
}

// Entry is implemented by every event that moves money or writes a
// transaction record. Projections, the audit and the webhook subscriber read
// money only through it, so a new aggregate that moves money needs no change
// to any of them.
type Entry interface {
	domain.Event
	Ledger() Effect
}

// ReservedPrefixes begin the references the service makes itself (a
// checkout session's payment, a checkout top-up, a wallet transfer's
// receiving side, an escrow's settlement records). A client's reference
// with one of them could take the place of the service's own and block it.
var ReservedPrefixes = []string{"checkout_", "TOPUP-", "WT-", "ESC-"}

// ErrReservedReference refuses a client reference in a reserved prefix.
var ErrReservedReference = domain.Invalidf("Reference prefix is reserved")

// ValidClientReference checks a reference a client chose: a valid
// reference outside the service's own prefixes (compared without case).
func ValidClientReference(ref string) error {
	if err := ValidReference(ref); err != nil {
		return err
	}
	upper := strings.ToUpper(ref)
	for _, p := range ReservedPrefixes {
		if strings.HasPrefix(upper, strings.ToUpper(p)) {
			return ErrReservedReference
		}
	}
	return nil
}

// ValidReference checks a payment reference.
func ValidReference(ref string) error {
	if strings.TrimSpace(ref) == "" {
		return domain.Invalidf("reference is required")
	}
	if utf8.RuneCountInString(ref) > 100 {
		return domain.Invalidf("reference must be at most 100 characters")
	}
	for _, r := range ref {
		if r < 0x20 || r == 0x7f {
			return domain.Invalidf("reference must not contain control characters")
		}
	}
	return nil
}
