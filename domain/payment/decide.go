package payment

import (
	"reflect"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
)

// MinAmount is the smallest deposit, withdrawal or transfer.
var MinAmount = money.Naira(100)

// MaxEscrows is the most escrows one payment funds: its record names each
// with a summary, in the events of its staging and of its settlement, and
// each must fit domain.MaxEventBytes.
const MaxEscrows = 20

// Intent is a payment to stage. The caller has resolved everything outside
// the payment itself (the fee from the merchant's policy, a transfer's
// receiver, a whitelisted address) before asking.
type Intent struct {
	ID          string
	Reference   string
	Type        ledger.Type
	Amount      money.Amount
	Fee         money.Amount
	CustomerID  string
	MerchantID  string
	Environment domain.Environment
	Narration   string
	Withdrawal  *ledger.WithdrawalDetails
	Blockchain  *ledger.BlockchainDetails
	Wallet      *ledger.WalletDetails
	Escrow      *ledger.EscrowDetails
	TestAccount *TestAccount
	// DepositAccount and Charge say where the payer pays an intent
	// collected through a provider (IntentCreated).
	DepositAccount *BankAccount
	Charge         *ChargeStart
	At             time.Time
}

// ErrNotFound is the answer for an unknown reference, or another
// customer's: the two are indistinguishable to the caller.
var ErrNotFound = domain.Invalidf("Transaction not found")

// ErrReferenceReused refuses a reference already naming another payment.
var ErrReferenceReused = domain.Errorf(domain.Conflict, "Reference already used for a different transaction")

// Stage decides the creation of an intent. An existing intent with the
// same reference is returned unchanged (nil event) when the request is the
// same payment, and refused otherwise, so a retried create-intent is safe
// and a reused reference can never stage a second payment.
func Stage(s State, in Intent) (*IntentCreated, error) {
	if err := ledger.ValidReference(in.Reference); err != nil {
		return nil, err
	}
	if in.Amount < MinAmount {
		return nil, domain.Invalidf("amount must be at least %s", MinAmount)
	}
	if in.Fee < 0 {
		return nil, domain.Invalidf("fee must not be negative")
	}
	details := 0
	for _, set := range []bool{in.Withdrawal != nil, in.Blockchain != nil, in.Wallet != nil, in.Escrow != nil} {
		if set {
			details++
		}
	}
	switch in.Type {
	case ledger.Deposit:
		if details != 0 || in.Fee != 0 {
			return nil, domain.Invalidf("A deposit takes no withdrawal, blockchain or wallet details")
		}
	case ledger.Withdrawal:
		if details != 1 || in.Wallet != nil || in.Escrow != nil {
			return nil, domain.Invalidf("A withdrawal needs exactly one of withdrawalDetails or blockchainDetails")
		}
	case ledger.WalletTransfer:
		if in.Wallet == nil || details != 1 || in.Wallet.CustomerID == "" {
			return nil, domain.Invalidf("walletDetails is required for a wallet_transfer")
		}
		if in.Fee != 0 {
			return nil, domain.Invalidf("A wallet transfer is free")
		}
		if in.Wallet.CustomerID == in.CustomerID {
			return nil, domain.Invalidf("You cannot transfer to yourself")
		}
	case ledger.EscrowPayment:
		if in.Escrow == nil || len(in.Escrow.EscrowIDs) == 0 || details != 1 {
			return nil, domain.Invalidf("escrowDetails.escrowId is required for an escrow payment")
		}
	default:
		return nil, domain.Invalidf("transactionType must be one of deposit, withdrawal, wallet_transfer, escrow")
	}
	rec := ledger.Record{
		ID: in.ID, Reference: in.Reference, Amount: in.Amount, Fee: in.Fee, Currency: ledger.Currency,
		Status: ledger.Pending, Type: in.Type, CreditType: ledger.Debit, CustomerID: in.CustomerID,
		MerchantID: in.MerchantID, Environment: in.Environment, Narration: in.Narration,
		WithdrawalDetails: in.Withdrawal, BlockchainDetails: in.Blockchain, WalletDetails: in.Wallet,
		EscrowDetails: in.Escrow, CreatedAt: in.At, UpdatedAt: in.At,
	}
	if in.Type == ledger.Deposit {
		rec.CreditType = ledger.Credit
	}
	if s.Exists() {
		// Compared with the request as staged: settling rewrites the record
		// (status, the escrows actually funded), not what was asked.
		if samePayment(s.Staged, rec) {
			return nil, nil
		}
		return nil, ErrReferenceReused
	}
	if in.DepositAccount != nil {
		if err := in.DepositAccount.Check(); err != nil {
			return nil, err
		}
	}
	if in.Charge != nil {
		if err := in.Charge.Check(); err != nil {
			return nil, err
		}
	}
	return &IntentCreated{Record: rec, TestAccount: in.TestAccount, DepositAccount: in.DepositAccount, Charge: in.Charge}, nil
}

// samePayment compares what a client asked for, ignoring ids and times.
func samePayment(a, b ledger.Record) bool {
	a.ID, a.Status, a.CreatedAt, a.UpdatedAt, a.Fee = "", "", time.Time{}, time.Time{}, 0
	b.ID, b.Status, b.CreatedAt, b.UpdatedAt, b.Fee = "", "", time.Time{}, time.Time{}, 0
	if a.WalletDetails != nil && b.WalletDetails != nil {
		wa, wb := *a.WalletDetails, *b.WalletDetails
		wa.Phone, wb.Phone, wa.CustomerName, wb.CustomerName = "", "", "", ""
		a.WalletDetails, b.WalletDetails = &wa, &wb
	}
	return reflect.DeepEqual(a, b)
}

// Outcome of an external step (the collection gateway, a payout provider).
type Outcome struct {
	OK     bool
	Reason string
}

// Execute decides what verifying a staged intent does: a deposit the
// gateway confirmed credits main from clearing; a transfer moves main to
// the receiver's main (receiverRecordID names the receiver's new record,
// receiverRef its reference); a withdrawal debits amount and fee. A
// deposit the gateway refused fails without moving money.
func Execute(s State, deposit Outcome, receiverRecordID, receiverRef string, at time.Time) (domain.Event, error) {
	if s.Phase != Staged {
		return nil, nil
	}
	r := s.Record
	m := ledger.Movement{MerchantID: r.MerchantID, Environment: r.Environment}
	r.UpdatedAt = at
	switch r.Type {
	case ledger.Deposit:
		if !deposit.OK {
			r.Status = ledger.Failed
			return Settled{Records: []ledger.Record{r}}, nil
		}
		m.Move(ledger.ExternalClearing(r.MerchantID), ledger.CustomerMain(r.CustomerID), r.Amount)
		r.Status = ledger.Success
		return Settled{Movement: &m, Records: []ledger.Record{r}}, nil
	case ledger.WalletTransfer:
		to := r.WalletDetails.CustomerID
		m.Move(ledger.CustomerMain(r.CustomerID), ledger.CustomerMain(to), r.Amount)
		r.Status = ledger.Success
		in := r
		in.ID, in.Reference, in.CustomerID, in.CreditType, in.CreatedAt = receiverRecordID, receiverRef, to, ledger.Credit, at
		in.WalletDetails = &ledger.WalletDetails{Narration: r.WalletDetails.Narration, CustomerID: r.CustomerID}
		return Settled{Movement: &m, Records: []ledger.Record{r, in}}, nil
	case ledger.Withdrawal:
		m.Move(ledger.CustomerMain(r.CustomerID), ledger.ExternalClearing(r.MerchantID), r.Amount)
		m.Move(ledger.CustomerMain(r.CustomerID), ledger.PlatformRevenue(r.MerchantID), r.Fee)
		return PayoutStarted{Movement: m, Record: r}, nil
	}
	return nil, domain.Errorf(domain.Internal, "payment: cannot execute %s", r.Type)
}

// PayEscrows settles a staged escrow payment with the funding movement the
// escrows decided (the caller checked the amount against what they are
// due) and buyerFee, the buyer's share of their escrow fees (the terms may
// have changed since staging with the total unchanged). paymentTokens and
// summaries (one per escrow, in order) complete the record's escrow
// details, clones included.
func PayEscrows(s State, m ledger.Movement, buyerFee money.Amount, escrowIDs, paymentTokens []string,
	summaries []ledger.EscrowSummary, at time.Time) (Settled, error) {
	if s.Phase != Staged || s.Record.Type != ledger.EscrowPayment {
		return Settled{}, domain.Errorf(domain.Internal, "payment: %s is not a staged escrow payment", s.Record.Reference)
	}
	r := s.Record
	r.Status, r.Fee, r.UpdatedAt = ledger.Success, buyerFee, at
	r.EscrowDetails = ledger.FundedEscrowDetails(escrowIDs, paymentTokens, summaries)
	return Settled{Movement: &m, Records: []ledger.Record{r}}, nil
}

// TopUp decides a test-wallet top-up: an intent settled at once, crediting
// main from clearing as a deposit. (The once-a-day rule is the wallet's.)
func TopUp(in Intent) (IntentCreated, Settled, error) {
	if in.Amount < money.Naira(1000) || in.Amount > money.Naira(100_000) {
		return IntentCreated{}, Settled{}, domain.Invalidf("amount must be between 1000 and 100000")
	}
	created := IntentCreated{Record: ledger.Record{
		ID: in.ID, Reference: in.Reference, Amount: in.Amount, Currency: ledger.Currency, Status: ledger.Pending,
		Type: ledger.Deposit, CreditType: ledger.Credit, CustomerID: in.CustomerID, MerchantID: in.MerchantID,
		Environment: in.Environment, Narration: "Wallet top-up", CreatedAt: in.At, UpdatedAt: in.At,
	}}
	ev, err := Execute(Apply(State{}, created), Outcome{OK: true}, "", "", in.At)
	if err != nil {
		return IntentCreated{}, Settled{}, err
	}
	return created, ev.(Settled), nil
}
