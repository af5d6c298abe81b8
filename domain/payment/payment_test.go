package payment

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/domaintest"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
)

var (
	now   = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	later = now.Add(5 * time.Minute)
	last  = now.Add(time.Hour)
)

func fold(events ...domain.Event) State {
	var s State
	for _, e := range events {
		s = Apply(s, e)
	}
	return s
}

func bank() *ledger.WithdrawalDetails {
	return &ledger.WithdrawalDetails{AccountName: "Ada Obi", AccountNumber: "0123456785", BankCode: "058", BankName: "GTBank", Narration: "rent"}
}

func chain() *ledger.BlockchainDetails {
	return &ledger.BlockchainDetails{ToAddress: "0xAbCdEf0123456789abcdef0123456789ABCDEF01", Network: "BSC"}
}

func peer() *ledger.WalletDetails {
	return &ledger.WalletDetails{Phone: "08031234567", Narration: "lunch", CustomerID: "c2", CustomerName: "Bola Ade"}
}

func testAccount() *TestAccount {
	return &TestAccount{BankName: "Test Bank", AccountNumber: "9990001112", AccountName: "Escrowd Test", Amount: money.Naira(5000)}
}

// Intents of each kind, as a handler would build them.
func depositIntent() Intent {
	return Intent{ID: "t1", Reference: "ref-1", Type: ledger.Deposit, Amount: money.Naira(5000), CustomerID: "c1",
		MerchantID: "m1", Environment: domain.Test, Narration: "funding", TestAccount: testAccount(), At: now}
}

func bankIntent() Intent {
	return Intent{ID: "t1", Reference: "ref-1", Type: ledger.Withdrawal, Amount: money.Naira(5000), Fee: money.Naira(50),
		CustomerID: "c1", MerchantID: "m1", Environment: domain.Test, Withdrawal: bank(), At: now}
}

func cryptoIntent() Intent {
	return Intent{ID: "t1", Reference: "ref-1", Type: ledger.Withdrawal, Amount: money.Naira(5000), Fee: 0,
		CustomerID: "c1", MerchantID: "m1", Environment: domain.Live, Blockchain: chain(), At: now}
}

func transferIntent() Intent {
	return Intent{ID: "t1", Reference: "ref-1", Type: ledger.WalletTransfer, Amount: money.Naira(250) + 50,
		CustomerID: "c1", MerchantID: "m1", Environment: domain.Test, Narration: "lunch", Wallet: peer(), At: now}
}

func escrowIntent() Intent {
	return Intent{ID: "t1", Reference: "ref-1", Type: ledger.EscrowPayment, Amount: money.Naira(1025), Fee: money.Naira(25),
		CustomerID: "c1", MerchantID: "m1", Environment: domain.Test, Escrow: &ledger.EscrowDetails{EscrowIDs: []string{"link-1"}}, At: now}
}

func with(in Intent, f func(*Intent)) Intent { f(&in); return in }

// record is the pending record Stage writes for in.
func record(in Intent) ledger.Record {
	r := ledger.Record{ID: in.ID, Reference: in.Reference, Amount: in.Amount, Fee: in.Fee, Currency: "NGN",
		Status: ledger.Pending, Type: in.Type, CreditType: ledger.Debit, CustomerID: in.CustomerID,
		MerchantID: in.MerchantID, Environment: in.Environment, Narration: in.Narration,
		WithdrawalDetails: in.Withdrawal, BlockchainDetails: in.Blockchain, WalletDetails: in.Wallet,
		EscrowDetails: in.Escrow, CreatedAt: in.At, UpdatedAt: in.At}
	if in.Type == ledger.Deposit {
		r.CreditType = ledger.Credit
	}
	return r
}

func staged(in Intent) IntentCreated {
	return IntentCreated{Record: record(in), TestAccount: in.TestAccount}
}

func TestStage(t *testing.T) {
	const (
		wantDepositDetails    = "A deposit takes no withdrawal, blockchain or wallet details"
		wantWithdrawalDetails = "A withdrawal needs exactly one of withdrawalDetails or blockchainDetails"
		wantWalletDetails     = "walletDetails is required for a wallet_transfer"
		wantEscrowDetails     = "escrowDetails.escrowId is required for an escrow payment"
	)
	tests := []struct {
		name    string
		given   []domain.Event
		in      Intent
		want    *IntentCreated
		wantErr error  // a sentinel, matched with errors.Is
		wantMsg string // or a 400 with this message
	}{
		{name: "deposit: a credit record with the test account", in: depositIntent(),
			want: &IntentCreated{Record: ledger.Record{ID: "t1", Reference: "ref-1", Amount: 500_000, Currency: "NGN",
				Status: ledger.Pending, Type: ledger.Deposit, CreditType: ledger.Credit, CustomerID: "c1", MerchantID: "m1",
				Environment: domain.Test, Narration: "funding", CreatedAt: now, UpdatedAt: now}, TestAccount: testAccount()}},
		{name: "bank withdrawal: a debit record with its fee", in: bankIntent(),
			want: &IntentCreated{Record: ledger.Record{ID: "t1", Reference: "ref-1", Amount: 500_000, Fee: 5_000, Currency: "NGN",
				Status: ledger.Pending, Type: ledger.Withdrawal, CreditType: ledger.Debit, CustomerID: "c1", MerchantID: "m1",
				Environment: domain.Test, WithdrawalDetails: bank(), CreatedAt: now, UpdatedAt: now}}},
		{name: "crypto withdrawal: no fee", in: cryptoIntent(),
			want: &IntentCreated{Record: ledger.Record{ID: "t1", Reference: "ref-1", Amount: 500_000, Currency: "NGN",
				Status: ledger.Pending, Type: ledger.Withdrawal, CreditType: ledger.Debit, CustomerID: "c1", MerchantID: "m1",
				Environment: domain.Live, BlockchainDetails: chain(), CreatedAt: now, UpdatedAt: now}}},
		{name: "crypto withdrawal with a fee", in: with(cryptoIntent(), func(in *Intent) { in.Fee = 1 }),
			want: &IntentCreated{Record: ledger.Record{ID: "t1", Reference: "ref-1", Amount: 500_000, Fee: 1, Currency: "NGN",
				Status: ledger.Pending, Type: ledger.Withdrawal, CreditType: ledger.Debit, CustomerID: "c1", MerchantID: "m1",
				Environment: domain.Live, BlockchainDetails: chain(), CreatedAt: now, UpdatedAt: now}}},
		{name: "wallet transfer: a debit record naming the receiver", in: transferIntent(),
			want: &IntentCreated{Record: ledger.Record{ID: "t1", Reference: "ref-1", Amount: 25_050, Currency: "NGN",
				Status: ledger.Pending, Type: ledger.WalletTransfer, CreditType: ledger.Debit, CustomerID: "c1", MerchantID: "m1",
				Environment: domain.Test, Narration: "lunch", WalletDetails: peer(), CreatedAt: now, UpdatedAt: now}}},
		{name: "escrow payment: a debit record naming the escrows", in: escrowIntent(),
			want: &IntentCreated{Record: ledger.Record{ID: "t1", Reference: "ref-1", Amount: money.Naira(1025), Fee: money.Naira(25), Currency: "NGN",
				Status: ledger.Pending, Type: ledger.EscrowPayment, CreditType: ledger.Debit, CustomerID: "c1", MerchantID: "m1",
				Environment: domain.Test, EscrowDetails: &ledger.EscrowDetails{EscrowIDs: []string{"link-1"}}, CreatedAt: now, UpdatedAt: now}}},
		{name: "exactly the minimum", in: with(depositIntent(), func(in *Intent) { in.Amount = money.Naira(100) }),
			want: &IntentCreated{Record: record(with(depositIntent(), func(in *Intent) { in.Amount = money.Naira(100) })), TestAccount: testAccount()}},

		{name: "below the minimum by a kobo", in: with(depositIntent(), func(in *Intent) { in.Amount = money.Naira(100) - 1 }),
			wantMsg: "amount must be at least 100"},
		{name: "zero amount", in: with(transferIntent(), func(in *Intent) { in.Amount = 0 }), wantMsg: "amount must be at least 100"},
		{name: "negative amount", in: with(bankIntent(), func(in *Intent) { in.Amount = -money.Naira(500) }), wantMsg: "amount must be at least 100"},
		{name: "negative fee", in: with(bankIntent(), func(in *Intent) { in.Fee = -1 }), wantMsg: "fee must not be negative"},
		{name: "missing reference", in: with(depositIntent(), func(in *Intent) { in.Reference = " " }), wantMsg: "reference is required"},
		{name: "long reference", in: with(depositIntent(), func(in *Intent) { in.Reference = strings.Repeat("r", 101) }),
			wantMsg: "reference must be at most 100 characters"},
		{name: "control character in reference", in: with(depositIntent(), func(in *Intent) { in.Reference = "r\n1" }),
			wantMsg: "reference must not contain control characters"},
		{name: "deposit with bank details", in: with(depositIntent(), func(in *Intent) { in.Withdrawal = bank() }), wantMsg: wantDepositDetails},
		{name: "deposit with blockchain details", in: with(depositIntent(), func(in *Intent) { in.Blockchain = chain() }), wantMsg: wantDepositDetails},
		{name: "deposit with wallet details", in: with(depositIntent(), func(in *Intent) { in.Wallet = peer() }), wantMsg: wantDepositDetails},
		{name: "withdrawal without details", in: with(bankIntent(), func(in *Intent) { in.Withdrawal = nil }), wantMsg: wantWithdrawalDetails},
		{name: "withdrawal with bank and blockchain details", in: with(bankIntent(), func(in *Intent) { in.Blockchain = chain() }), wantMsg: wantWithdrawalDetails},
		{name: "withdrawal with wallet details only", in: with(bankIntent(), func(in *Intent) { in.Withdrawal, in.Wallet = nil, peer() }), wantMsg: wantWithdrawalDetails},
		{name: "withdrawal with bank and wallet details", in: with(bankIntent(), func(in *Intent) { in.Wallet = peer() }), wantMsg: wantWithdrawalDetails},
		{name: "transfer without wallet details", in: with(transferIntent(), func(in *Intent) { in.Wallet = nil }), wantMsg: wantWalletDetails},
		{name: "transfer with bank details instead", in: with(transferIntent(), func(in *Intent) { in.Wallet, in.Withdrawal = nil, bank() }), wantMsg: wantWalletDetails},
		{name: "transfer with wallet and blockchain details", in: with(transferIntent(), func(in *Intent) { in.Blockchain = chain() }), wantMsg: wantWalletDetails},
		{name: "escrow payment without escrow details", in: with(escrowIntent(), func(in *Intent) { in.Escrow = nil }), wantMsg: wantEscrowDetails},
		{name: "escrow payment with no escrow ids", in: with(escrowIntent(), func(in *Intent) { in.Escrow = &ledger.EscrowDetails{} }), wantMsg: wantEscrowDetails},
		{name: "escrow payment with empty escrow ids", in: with(escrowIntent(), func(in *Intent) { in.Escrow = &ledger.EscrowDetails{EscrowIDs: []string{}} }), wantMsg: wantEscrowDetails},
		{name: "escrow payment with escrow and wallet details", in: with(escrowIntent(), func(in *Intent) { in.Wallet = peer() }), wantMsg: wantEscrowDetails},
		{name: "escrow payment with escrow and bank details", in: with(escrowIntent(), func(in *Intent) { in.Withdrawal = bank() }), wantMsg: wantEscrowDetails},
		{name: "transfer to oneself", in: with(transferIntent(), func(in *Intent) { in.Wallet.CustomerID = "c1" }), wantMsg: "You cannot transfer to yourself"},
		{name: "commission type is not a payment", in: with(depositIntent(), func(in *Intent) { in.Type = ledger.Commission }),
			wantMsg: "transactionType must be one of deposit, withdrawal, wallet_transfer, escrow"},
		{name: "plain transfer type", in: with(transferIntent(), func(in *Intent) { in.Type = ledger.Type("transfer") }),
			wantMsg: "transactionType must be one of deposit, withdrawal, wallet_transfer, escrow"},
		{name: "missing type", in: with(depositIntent(), func(in *Intent) { in.Type = "" }),
			wantMsg: "transactionType must be one of deposit, withdrawal, wallet_transfer, escrow"},

		// A retried create-intent: same payment, whatever the new id, time and
		// fee, and whatever the phone and name the receiver was found by.
		{name: "retry of a staged deposit", given: []domain.Event{staged(depositIntent())},
			in: with(depositIntent(), func(in *Intent) { in.ID, in.At, in.TestAccount = "t9", later, nil }), want: nil},
		{name: "retry of a staged withdrawal with a new fee", given: []domain.Event{staged(bankIntent())},
			in: with(bankIntent(), func(in *Intent) { in.ID, in.Fee = "t9", money.Naira(75) }), want: nil},
		{name: "retry of a transfer by another phone form", given: []domain.Event{staged(transferIntent())},
			in: with(transferIntent(), func(in *Intent) { in.Wallet.Phone, in.Wallet.CustomerName = "2348031234567", "B. Ade" }), want: nil},
		{name: "retry of a settled deposit", given: []domain.Event{staged(depositIntent()),
			Settled{Movement: depositMovement(), Records: []ledger.Record{settledRecord(depositIntent(), ledger.Success)}}},
			in: depositIntent(), want: nil},
		{name: "retry of a withdrawal paying out", given: []domain.Event{staged(cryptoIntent()),
			PayoutStarted{Movement: withdrawalMovement(cryptoIntent()), Record: record(cryptoIntent())}},
			in: cryptoIntent(), want: nil},

		// An escrow payment's settled record names the escrows it funded
		// (a clone of a multi-unit link, not the link): a retry of the
		// request is still the same payment.
		{name: "retry of a settled escrow payment that funded a clone", given: []domain.Event{staged(escrowIntent()),
			Settled{Movement: depositMovement(), Records: []ledger.Record{fundedClone(settledRecord(escrowIntent(), ledger.Success))}}},
			in: escrowIntent(), want: nil},
		{name: "reused reference, other escrow", given: []domain.Event{staged(escrowIntent())},
			in: with(escrowIntent(), func(in *Intent) { in.Escrow = &ledger.EscrowDetails{EscrowIDs: []string{"e-2"}} }), wantErr: ErrReferenceReused},
		{name: "reused reference, other amount", given: []domain.Event{staged(depositIntent())},
			in: with(depositIntent(), func(in *Intent) { in.Amount++ }), wantErr: ErrReferenceReused},
		{name: "reused reference, other customer", given: []domain.Event{staged(depositIntent())},
			in: with(depositIntent(), func(in *Intent) { in.CustomerID = "c3" }), wantErr: ErrReferenceReused},
		{name: "reused reference, other type", given: []domain.Event{staged(depositIntent())},
			in: with(bankIntent(), func(in *Intent) { in.Amount = money.Naira(5000) }), wantErr: ErrReferenceReused},
		{name: "reused reference, other narration", given: []domain.Event{staged(depositIntent())},
			in: with(depositIntent(), func(in *Intent) { in.Narration = "other" }), wantErr: ErrReferenceReused},
		{name: "reused reference, other bank account", given: []domain.Event{staged(bankIntent())},
			in: with(bankIntent(), func(in *Intent) { in.Withdrawal.AccountNumber = "0000000000" }), wantErr: ErrReferenceReused},
		{name: "reused reference, other receiver", given: []domain.Event{staged(transferIntent())},
			in: with(transferIntent(), func(in *Intent) { in.Wallet.CustomerID = "c3" }), wantErr: ErrReferenceReused},
		{name: "reused reference, bank then crypto", given: []domain.Event{staged(bankIntent())},
			in: with(cryptoIntent(), func(in *Intent) { in.Environment = domain.Test }), wantErr: ErrReferenceReused},
		{name: "an invalid retry is refused as invalid first", given: []domain.Event{staged(depositIntent())},
			in: with(depositIntent(), func(in *Intent) { in.Amount = 1 }), wantMsg: "amount must be at least 100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Stage(fold(tt.given...), tt.in)
			switch {
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) || got != nil {
					t.Fatalf("Stage() = %+v, %v; want %v", got, err, tt.wantErr)
				}
				return
			case tt.wantMsg != "":
				if err == nil || domain.ErrorMessage(err) != tt.wantMsg || domain.ErrorCode(err) != domain.Invalid || got != nil {
					t.Fatalf("Stage() = %+v, %v; want 400 %q", got, err, tt.wantMsg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Stage() = %+v\nwant %+v", got, tt.want)
			}
			if got != nil {
				if s := Apply(State{}, *got); s.Phase != Staged || !reflect.DeepEqual(s.Record, got.Record) || s.Movement != nil {
					t.Fatalf("applied: %+v", s)
				}
			}
		})
	}
	if domain.ErrorCode(ErrReferenceReused) != domain.Conflict {
		t.Fatalf("ErrReferenceReused code %v", domain.ErrorCode(ErrReferenceReused))
	}
}

// fundedClone is an escrow payment's record after it funded a clone.
func fundedClone(r ledger.Record) ledger.Record {
	r.EscrowDetails = &ledger.EscrowDetails{EscrowIDs: []string{"clone-1"}, PaymentTokens: []string{"PT_CLONE"}}
	return r
}

func settledRecord(in Intent, status ledger.Status) ledger.Record {
	r := record(in)
	r.Status, r.UpdatedAt = status, later
	return r
}

func depositMovement() *ledger.Movement {
	return &ledger.Movement{MerchantID: "m1", Environment: domain.Test, Postings: []ledger.Posting{
		{From: ledger.ExternalClearing("m1"), To: ledger.CustomerMain("c1"), Amount: money.Naira(5000)},
	}}
}

func withdrawalMovement(in Intent) ledger.Movement {
	m := ledger.Movement{MerchantID: in.MerchantID, Environment: in.Environment, Postings: []ledger.Posting{
		{From: ledger.CustomerMain("c1"), To: ledger.ExternalClearing(in.MerchantID), Amount: in.Amount},
	}}
	if in.Fee != 0 {
		m.Postings = append(m.Postings, ledger.Posting{From: ledger.CustomerMain("c1"), To: ledger.PlatformRevenue(in.MerchantID), Amount: in.Fee})
	}
	return m
}

func TestExecute(t *testing.T) {
	transferPayer := settledRecord(transferIntent(), ledger.Success)
	transferReceiver := transferPayer
	transferReceiver.ID, transferReceiver.Reference, transferReceiver.CustomerID = "t2", "ref-1-in", "c2"
	transferReceiver.CreditType, transferReceiver.CreatedAt = ledger.Credit, later
	transferReceiver.WalletDetails = &ledger.WalletDetails{Narration: "lunch", CustomerID: "c1"}

	payingOut := record(bankIntent())
	payingOut.UpdatedAt = later

	tests := []struct {
		name    string
		given   []domain.Event
		deposit Outcome
		want    domain.Event
		phase   Phase
	}{
		{name: "deposit the gateway confirmed: clearing to customer main",
			given: []domain.Event{staged(depositIntent())}, deposit: Outcome{OK: true},
			want:  Settled{Movement: depositMovement(), Records: []ledger.Record{settledRecord(depositIntent(), ledger.Success)}},
			phase: Done},
		{name: "deposit the gateway refused: failed record, nothing moves",
			given: []domain.Event{staged(depositIntent())}, deposit: Outcome{OK: false, Reason: "declined"},
			want:  Settled{Records: []ledger.Record{settledRecord(depositIntent(), ledger.Failed)}},
			phase: Done},
		{name: "transfer: payer debit and receiver credit, main to main",
			given: []domain.Event{staged(transferIntent())},
			want: Settled{Movement: &ledger.Movement{MerchantID: "m1", Environment: domain.Test, Postings: []ledger.Posting{
				{From: ledger.CustomerMain("c1"), To: ledger.CustomerMain("c2"), Amount: 25_050},
			}}, Records: []ledger.Record{transferPayer, transferReceiver}},
			phase: Done},
		{name: "bank withdrawal: amount to clearing, fee to platform revenue",
			given: []domain.Event{staged(bankIntent())},
			want:  PayoutStarted{Movement: withdrawalMovement(bankIntent()), Record: payingOut},
			phase: PayingOut},
		{name: "crypto withdrawal: no fee leg",
			given: []domain.Event{staged(cryptoIntent())},
			want: PayoutStarted{Movement: ledger.Movement{MerchantID: "m1", Environment: domain.Live, Postings: []ledger.Posting{
				{From: ledger.CustomerMain("c1"), To: ledger.ExternalClearing("m1"), Amount: money.Naira(5000)},
			}}, Record: func() ledger.Record { r := record(cryptoIntent()); r.UpdatedAt = later; return r }()},
			phase: PayingOut},
		{name: "no intent", want: nil, phase: ""},
		{name: "settled deposit", given: []domain.Event{staged(depositIntent()),
			Settled{Movement: depositMovement(), Records: []ledger.Record{settledRecord(depositIntent(), ledger.Success)}}},
			deposit: Outcome{OK: true}, want: nil, phase: Done},
		{name: "failed deposit is not retried", given: []domain.Event{staged(depositIntent()),
			Settled{Records: []ledger.Record{settledRecord(depositIntent(), ledger.Failed)}}},
			deposit: Outcome{OK: true}, want: nil, phase: Done},
		{name: "withdrawal paying out", given: []domain.Event{staged(bankIntent()),
			PayoutStarted{Movement: withdrawalMovement(bankIntent()), Record: payingOut}}, want: nil, phase: PayingOut},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fold(tt.given...)
			got, err := Execute(s, tt.deposit, "t2", "ref-1-in", later)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Execute() = %+v\nwant %+v", got, tt.want)
			}
			if got != nil {
				checkEntry(t, got)
				s = Apply(s, got)
			}
			if s.Phase != tt.phase {
				t.Fatalf("phase %q, want %q", s.Phase, tt.phase)
			}
		})
	}
}

func TestExecuteTransferState(t *testing.T) {
	s := fold(staged(transferIntent()))
	ev, err := Execute(s, Outcome{}, "t2", "ref-1-in", later)
	if err != nil {
		t.Fatal(err)
	}
	s = Apply(s, ev)
	settled := ev.(Settled)
	var counterparty *ledger.Record
	for i, r := range settled.Records {
		if r.ID != s.Record.ID {
			counterparty = &settled.Records[i]
		}
	}
	if s.Phase != Done || s.Record.ID != "t1" || s.Record.Status != ledger.Success ||
		counterparty == nil || counterparty.ID != "t2" || counterparty.CustomerID != "c2" ||
		!reflect.DeepEqual(s.Movement, settled.Movement) {
		t.Fatalf("state %+v, settled records %+v", s, settled.Records)
	}
	// The staged record's details are not shared with the receiver's.
	if s.Record.WalletDetails.CustomerID != "c2" || s.Record.WalletDetails.Phone != "08031234567" {
		t.Fatalf("payer details %+v", s.Record.WalletDetails)
	}
}

func TestExecuteUnknownType(t *testing.T) {
	s := State{Phase: Staged, Record: ledger.Record{ID: "t1", Type: ledger.Commission, MerchantID: "m1", Environment: domain.Test}}
	ev, err := Execute(s, Outcome{OK: true}, "", "", later)
	if ev != nil || domain.ErrorCode(err) != domain.Internal {
		t.Fatalf("Execute() = %+v, %v", ev, err)
	}
}

func TestTopUp(t *testing.T) {
	in := func(a money.Amount) Intent {
		return Intent{ID: "t1", Reference: "topup-1", Amount: a, CustomerID: "c1", MerchantID: "m1", Environment: domain.Test, At: now}
	}
	tests := []struct {
		name   string
		amount money.Amount
		ok     bool
	}{
		{name: "999.99 refused", amount: money.Naira(1000) - 1},
		{name: "zero refused", amount: 0},
		{name: "1000 ok", amount: money.Naira(1000), ok: true},
		{name: "5000.50 ok", amount: 500_050, ok: true},
		{name: "100000 ok", amount: money.Naira(100_000), ok: true},
		{name: "100000.01 refused", amount: money.Naira(100_000) + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			created, settled, err := TopUp(in(tt.amount))
			if !tt.ok {
				if err == nil || domain.ErrorMessage(err) != "amount must be between 1000 and 100000" || domain.ErrorCode(err) != domain.Invalid {
					t.Fatalf("TopUp(%s) = %v", tt.amount, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			rec := ledger.Record{ID: "t1", Reference: "topup-1", Amount: tt.amount, Currency: "NGN", Status: ledger.Pending,
				Type: ledger.Deposit, CreditType: ledger.Credit, CustomerID: "c1", MerchantID: "m1", Environment: domain.Test,
				Narration: "Wallet top-up", CreatedAt: now, UpdatedAt: now}
			if want := (IntentCreated{Record: rec}); !reflect.DeepEqual(created, want) {
				t.Fatalf("created %+v\nwant %+v", created, want)
			}
			rec.Status = ledger.Success
			want := Settled{Movement: &ledger.Movement{MerchantID: "m1", Environment: domain.Test, Postings: []ledger.Posting{
				{From: ledger.ExternalClearing("m1"), To: ledger.CustomerMain("c1"), Amount: tt.amount},
			}}, Records: []ledger.Record{rec}}
			if !reflect.DeepEqual(settled, want) {
				t.Fatalf("settled %+v\nwant %+v", settled, want)
			}
			checkEntry(t, created)
			checkEntry(t, settled)
			if s := fold(created, settled); s.Phase != Done || s.Record.Status != ledger.Success {
				t.Fatalf("state %+v", s)
			}
		})
	}
}

// checkEntry: a payment event is a ledger entry whose movement, if any, is
// valid and conserves money, and whose records are this payment's.
func checkEntry(t *testing.T, ev domain.Event) {
	t.Helper()
	e, ok := ev.(ledger.Entry)
	if !ok {
		t.Fatalf("%T is not a ledger.Entry", ev)
	}
	eff := e.Ledger()
	switch ev.(type) {
	case PayoutLeased, PayoutAccepted:
		// The events that neither move money nor change a record.
		if eff.Movement != nil || len(eff.Records) > 0 {
			t.Fatalf("a payout lease has a ledger effect: %+v", eff)
		}
		return
	}
	if len(eff.Records) == 0 {
		t.Fatalf("%T records nothing", ev)
	}
	if eff.Movement == nil {
		return
	}
	if err := eff.Movement.Validate(); err != nil {
		t.Fatalf("%T: %v", ev, err)
	}
	if len(eff.Movement.Postings) == 0 {
		t.Fatalf("%T: empty movement", ev)
	}
	var sum money.Amount
	for _, v := range eff.Movement.Deltas() {
		sum += v
	}
	if sum != 0 {
		t.Fatalf("%T: movement sums to %d", ev, sum)
	}
	for _, r := range eff.Records {
		if r.MerchantID != eff.Movement.MerchantID || r.Environment != eff.Movement.Environment {
			t.Fatalf("%T: record %s of %s/%s, movement of %s/%s", ev, r.ID, r.MerchantID, r.Environment,
				eff.Movement.MerchantID, eff.Movement.Environment)
		}
	}
}

// allEvents is one event of every kind, taken from real decisions.
func allEvents(t *testing.T) []domain.Event {
	t.Helper()
	var out []domain.Event
	decide := func(s State, ev domain.Event, err error) State {
		t.Helper()
		if err != nil || ev == nil {
			t.Fatalf("decision: %v, %v", ev, err)
		}
		out = append(out, ev)
		return Apply(s, ev)
	}
	stage := func(in Intent) State {
		t.Helper()
		ev, err := Stage(State{}, in)
		if err != nil {
			t.Fatal(err)
		}
		return decide(State{}, *ev, nil)
	}
	s := stage(depositIntent())
	ev, err := Execute(s, Outcome{OK: true}, "", "", later)
	decide(s, ev, err)
	ev, err = Execute(s, Outcome{}, "", "", later)
	decide(s, ev, err)
	s = stage(transferIntent())
	ev, err = Execute(s, Outcome{}, "t2", "ref-1-in", later)
	decide(s, ev, err)
	for _, in := range []Intent{bankIntent(), cryptoIntent()} {
		s = stage(in)
		ev, err = Execute(s, Outcome{}, "", "", later)
		s = decide(s, ev, err)
		for _, st := range []ProviderStatus{ProviderSucceeded, ProviderFailed, ProviderReversed} {
			decide(s, AnswerSend(s, s.LeaseHolder, PayoutAnswer{Status: st, Reason: "rejected"}, last), nil)
		}
		accepted := decide(s, AnswerSend(s, s.LeaseHolder, PayoutAnswer{Status: ProviderPending, Transfer: "TRF_1"}, last), nil)
		ev, err = SettlePayout(accepted, PayoutAnswer{Status: ProviderSucceeded}, last)
		decide(accepted, ev, err)
	}
	created, settled, err := TopUp(Intent{ID: "t5", Reference: "tu", Amount: money.Naira(1000), CustomerID: "c1", MerchantID: "m1", Environment: domain.Test, At: now})
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, created, settled)
	// A withdrawal whose debit took the lease, then another verify's lease
	// after it ran out, given up.
	s = stage(bankIntent())
	ev, err = Execute(s, Outcome{}, "", "", later)
	s = decide(s, ev.(PayoutStarted).Leased("v1", later), err)
	ev, err = LeasePayout(s, "v2", last)
	s = decide(s, ev, err)
	decide(s, ReleasePayout(s, "v2", last.Add(time.Second)), nil)
	return out
}

func TestPayoutLease(t *testing.T) {
	r := record(bankIntent())
	r.UpdatedAt = later
	started := PayoutStarted{Movement: withdrawalMovement(bankIntent()), Record: r}
	leasedV1 := []domain.Event{staged(bankIntent()), started.Leased("v1", later)} // v1 until later+1m
	completed := append(leasedV1[:2:2], PayoutCompleted{Record: r})
	released := append(leasedV1[:2:2], PayoutLeased{Holder: "v1", At: later, Until: later})
	in := func(d time.Duration) time.Time { return later.Add(d) }
	lease := func(holder string, at time.Time) PayoutLeased {
		return PayoutLeased{Holder: holder, At: at, Until: at.Add(PayoutLease)}
	}
	tests := []struct {
		name    string
		given   []domain.Event
		holder  string
		at      time.Time
		want    domain.Event
		wantErr error
	}{
		{name: "staged: nothing to lease", given: []domain.Event{staged(bankIntent())}, holder: "v2", at: in(0)},
		{name: "another verify's lease runs", given: leasedV1, holder: "v2", at: in(59 * time.Second), wantErr: ErrPayoutInProgress},
		{name: "the lease ran out", given: leasedV1, holder: "v2", at: in(PayoutLease), want: lease("v2", in(PayoutLease))},
		{name: "its holder renews it", given: leasedV1, holder: "v1", at: in(time.Second), want: lease("v1", in(time.Second))},
		{name: "given up: the next verify takes it at once", given: released, holder: "v2", at: in(0), want: lease("v2", in(0))},
		{name: "given up: a verify whose clock is behind the releaser's takes it at once", given: released, holder: "v2",
			at: in(-time.Second), want: lease("v2", in(-time.Second))},
		{name: "debited before leases existed", given: []domain.Event{staged(bankIntent()), started}, holder: "v2", at: in(0), want: lease("v2", in(0))},
		{name: "paid out already", given: completed, holder: "v2", at: in(2 * PayoutLease)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fold(tt.given...)
			got, err := LeasePayout(s, tt.holder, tt.at)
			if err != tt.wantErr || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("LeasePayout() = %+v, %v; want %+v, %v", got, err, tt.want, tt.wantErr)
			}
			if got != nil {
				checkEntry(t, got)
				if s = Apply(s, got); s.LeaseHolder != tt.holder || !s.LeaseUntil.Equal(tt.at.Add(PayoutLease)) || s.Phase != PayingOut {
					t.Fatalf("after the lease: holder %q until %v, phase %q", s.LeaseHolder, s.LeaseUntil, s.Phase)
				}
				if d := s.PayoutCallDeadline(); !d.Equal(tt.at.Add(PayoutCallTimeout)) {
					t.Fatalf("the holder's call deadline %v, want PayoutCallTimeout after the lease was taken (%v)", d, tt.at.Add(PayoutCallTimeout))
				}
			}
		})
	}
}

func TestReleasePayout(t *testing.T) {
	r := record(bankIntent())
	leasedV1 := []domain.Event{staged(bankIntent()), PayoutStarted{Movement: withdrawalMovement(bankIntent()), Record: r}.Leased("v1", later)}
	tests := []struct {
		name   string
		given  []domain.Event
		holder string
		at     time.Time
		want   domain.Event
	}{
		{name: "its holder gives it up", given: leasedV1, holder: "v1", at: later.Add(time.Second),
			want: PayoutLeased{Holder: "v1", At: later.Add(time.Second), Until: later.Add(time.Second)}},
		{name: "not the holder", given: leasedV1, holder: "v2", at: later.Add(time.Second)},
		{name: "the lease ran out (another verify may hold it)", given: leasedV1, holder: "v1", at: later.Add(PayoutLease)},
		{name: "paid out already", given: append(leasedV1[:2:2], PayoutCompleted{Record: r}), holder: "v1", at: later.Add(time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fold(tt.given...)
			got := ReleasePayout(s, tt.holder, tt.at)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ReleasePayout() = %+v; want %+v", got, tt.want)
			}
			if got != nil {
				if _, err := LeasePayout(Apply(s, got), "v2", tt.at); err != nil {
					t.Fatalf("after the release another verify cannot lease: %v", err)
				}
				// Given up means held by nobody, whatever another verify's clock says.
				if after := Apply(s, got); after.LeaseHolder != "" || !after.LeaseUntil.IsZero() {
					t.Fatalf("after the release: holder %q until %v, want none", after.LeaseHolder, after.LeaseUntil)
				}
				if _, err := LeasePayout(Apply(s, got), "v2", tt.at.Add(-time.Minute)); err != nil {
					t.Fatalf("after the release a verify on a clock behind cannot lease: %v", err)
				}
			}
		})
	}
}

// Every event read back from the store is the event that was decided, and
// every one is a ledger entry with a valid, balanced movement.
func TestRegistryRoundTrip(t *testing.T) {
	evs := allEvents(t)
	for _, e := range evs {
		checkEntry(t, e)
	}
	// Every registered type, decoded equal to the decided event.
	stored := domaintest.RoundTrip(t, Registry, evs...)
	// Folding the stored events gives the state the decided ones gave.
	for _, span := range [][2]int{{0, 2}, {3, 5}, {5, 7}} {
		if want, got := fold(evs[span[0]:span[1]]...), fold(stored[span[0]:span[1]]...); !reflect.DeepEqual(want, got) {
			t.Fatalf("state from store %+v\nwant %+v", got, want)
		}
	}
}

func TestEventsAreLedgerEntries(t *testing.T) {
	for typ, ctor := range Registry {
		ptr := ctor()
		val := reflect.ValueOf(ptr).Elem().Interface()
		if _, ok := val.(ledger.Entry); !ok {
			t.Errorf("%s (%T) is not a ledger.Entry", typ, val)
		}
	}
}

func TestStreamID(t *testing.T) {
	a := StreamID("m1", domain.Test, "ref-1")
	if a != StreamID("m1", domain.Test, "ref-1") {
		t.Fatal("not deterministic")
	}
	if !strings.HasPrefix(a, "m1.test.") || len(a) != len("m1.test.")+32 {
		t.Fatalf("StreamID = %q", a)
	}
	for _, other := range []string{StreamID("m1", domain.Live, "ref-1"), StreamID("m2", domain.Test, "ref-1"), StreamID("m1", domain.Test, "ref-2")} {
		if other == a {
			t.Fatalf("collision %q", a)
		}
	}
	if s := StreamID("m1", domain.Test, "a/b\n.c"); strings.ContainsAny(s[len("m1.test."):], "/\n.") {
		t.Fatalf("unsafe stream id %q", s)
	}
}
