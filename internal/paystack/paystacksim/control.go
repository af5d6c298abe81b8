package paystacksim

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/escrowd/escrowd/internal/paystack"
)

// TransactionRecord is a transaction as the simulator holds it.
type TransactionRecord struct {
	ID                    int64
	Reference             string
	AccessCode            string
	Amount, Fees          int64 // kobo
	Status                string
	Channel               string
	Email, CustomerCode   string
	ReceiverAccountNumber string
	CallbackURL           string
	PaidAt, CreatedAt     time.Time
}

// TransferRecord is a transfer as the simulator holds it.
type TransferRecord struct {
	ID                   int64
	TransferCode         string
	Reference            string
	Amount, Fee          int64 // kobo
	Status               string
	Reason               string
	RecipientCode        string
	AccountNumber        string
	BankCode             string
	CreatedAt, UpdatedAt time.Time
}

// Transactions returns every transaction, oldest first.
func (s *Sim) Transactions() []TransactionRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]TransactionRecord, 0, len(s.st.txns))
	for _, t := range s.st.txns {
		out = append(out, TransactionRecord{ID: t.id, Reference: t.ref, AccessCode: t.accessCode, Amount: t.amount,
			Fees: t.fees, Status: t.status, Channel: t.channel, Email: t.customer.email, CustomerCode: t.customer.code,
			ReceiverAccountNumber: t.receiverAccount, CallbackURL: t.callbackURL, PaidAt: t.paidAt, CreatedAt: t.createdAt})
	}
	return out
}

// Transfers returns every transfer, oldest first.
func (s *Sim) Transfers() []TransferRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]TransferRecord, 0, len(s.st.transfers))
	for _, t := range s.st.transfers {
		out = append(out, TransferRecord{ID: t.id, TransferCode: t.code, Reference: t.ref, Amount: t.amount, Fee: t.fee,
			Status: t.status, Reason: t.reason, RecipientCode: t.recipient.code, AccountNumber: t.recipient.accountNumber,
			BankCode: t.recipient.bankCode, CreatedAt: t.createdAt, UpdatedAt: t.updatedAt})
	}
	return out
}

// Balance is the integration's balance in kobo: the starting balance,
// plus what was paid in less Paystack's fees, less the transfers not
// returned and their fees.
func (s *Sim) Balance() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.balance
}

// AutoSettleTransfers sets how initiated transfers end by themselves:
// they answer "pending" and, after the wait, take status ("success",
// "failed" or "reversed") with its event. An empty status turns it off:
// transfers stay pending until SettleTransfer. The default is "success"
// after Config.SettleAfter. It applies to transfers initiated afterwards.
func (s *Sim) AutoSettleTransfers(status string, after time.Duration) error {
	if status != "" && !slices.Contains([]string{paystack.TransferSuccess, paystack.TransferFailed, paystack.TransferReversed}, status) {
		return fmt.Errorf("paystacksim: a transfer cannot settle as %q", status)
	}
	s.mu.Lock()
	s.st.autoStatus, s.st.autoAfter = status, after
	s.mu.Unlock()
	return nil
}

// The payer of every simulated transfer into a dedicated account.
const (
	senderName    = "ADEBAYO OKONKWO"
	senderBank    = "Guaranty Trust Bank"
	senderAccount = "0123456789"
)

// PayIntoDedicatedAccount is a bank transfer of kobo into a dedicated
// account: a successful transaction with channel dedicated_nuban, the
// receiving account in its authorization, Paystack's fee for dedicated
// accounts, and a charge.success event. It returns the transaction's
// reference.
func (s *Sim) PayIntoDedicatedAccount(accountNumber string, kobo int64) (string, error) {
	if kobo <= 0 {
		return "", errors.New("paystacksim: a payment is a positive amount of kobo")
	}
	s.mu.Lock()
	a := s.st.accounts[accountNumber]
	if a == nil {
		s.mu.Unlock()
		return "", fmt.Errorf("paystacksim: no dedicated account %q", accountNumber)
	}
	now := s.cfg.Now()
	t := &txn{id: s.st.id(), ref: "dva_" + randCode(16), amount: kobo, fees: dedicatedAccountFee(kobo), currency: "NGN",
		status: paystack.TransactionSuccess, channel: paystack.ChannelDedicatedNUBAN, gateway: "Approved",
		customer: a.customer, paidAt: now, createdAt: now, receiverAccount: a.number, receiverBank: a.bankName,
		senderName: senderName, senderBank: senderBank, senderAcc: senderAccount, authCode: "AUTH_" + randCode(10)}
	s.st.txns = append(s.st.txns, t)
	s.st.txnByRef[t.ref] = t
	s.st.balance += t.amount - t.fees
	data := t.json(s.st.domain)
	s.mu.Unlock()
	s.emit("charge.success", data)
	return t.ref, nil
}

// CompleteCheckout is the payer finishing (ok) or failing an initialized
// transaction with channel ("card", "bank", "ussd" or "bank_transfer",
// one the transaction allows). A success takes Paystack's local fee and
// sends charge.success; a failure sends nothing, as Paystack does not.
func (s *Sim) CompleteCheckout(reference, channel string, ok bool) error {
	s.mu.Lock()
	t := s.st.txnByRef[reference]
	if t == nil {
		s.mu.Unlock()
		return fmt.Errorf("paystacksim: no transaction %q", reference)
	}
	if t.status != paystack.TransactionAbandoned {
		st := t.status
		s.mu.Unlock()
		return fmt.Errorf("paystacksim: transaction %q is already %s", reference, st)
	}
	if !channelOK(t, channel) {
		s.mu.Unlock()
		return fmt.Errorf("paystacksim: transaction %q cannot be paid with %q", reference, channel)
	}
	t.channel = channel
	if !ok {
		t.status, t.gateway = paystack.TransactionFailed, "Declined"
		s.mu.Unlock()
		return nil
	}
	t.status, t.gateway, t.paidAt = paystack.TransactionSuccess, "Successful", s.cfg.Now()
	t.fees, t.authCode = localFee(t.amount), "AUTH_"+randCode(10)
	if channel == paystack.ChannelBankTransfer {
		t.senderName, t.senderBank, t.senderAcc = senderName, senderBank, senderAccount
	}
	s.st.balance += t.amount - t.fees
	data := t.json(s.st.domain)
	s.mu.Unlock()
	s.emit("charge.success", data)
	return nil
}

// checkoutOf finds an initialized transaction by its access code.
func (s *Sim) checkoutOf(accessCode string) (TransactionRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.st.txnByAccess[accessCode]
	if t == nil {
		return TransactionRecord{}, false
	}
	return TransactionRecord{ID: t.id, Reference: t.ref, AccessCode: t.accessCode, Amount: t.amount, Status: t.status,
		Email: t.customer.email, CallbackURL: t.callbackURL, CreatedAt: t.createdAt}, true
}

// channelsOf is what the checkout page offers for a transaction.
func (s *Sim) channelsOf(accessCode string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.st.txnByAccess[accessCode]
	var out []string
	for _, ch := range []string{paystack.ChannelCard, paystack.ChannelBank, paystack.ChannelUSSD, paystack.ChannelBankTransfer} {
		if t != nil && channelOK(t, ch) {
			out = append(out, ch)
		}
	}
	return out
}
