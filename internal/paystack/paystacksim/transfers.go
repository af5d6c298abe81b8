package paystacksim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/escrowd/escrowd/internal/paystack"
)

func (s *Sim) createRecipient(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Type          string `json:"type"`
		Name          string `json:"name"`
		AccountNumber string `json:"account_number"`
		BankCode      string `json:"bank_code"`
		Currency      string `json:"currency"`
	}
	if err := decodeBody(r, &in); err != nil {
		writeError(w, http.StatusBadRequest, "Invalid request body", "", "validation_error")
		return
	}
	if in.Type != "nuban" {
		writeError(w, http.StatusBadRequest, "Invalid recipient type", "", "validation_error")
		return
	}
	if in.Name == "" {
		writeError(w, http.StatusBadRequest, "Name is required", "", "validation_error")
		return
	}
	if in.AccountNumber == "" {
		writeError(w, http.StatusBadRequest, "Account number is required", "", "validation_error")
		return
	}
	if in.BankCode == "" {
		writeError(w, http.StatusBadRequest, "Bank code is required", "", "validation_error")
		return
	}
	if in.Currency == "" {
		in.Currency = "NGN"
	}
	// Paystack resolves the account when it registers a recipient.
	bank, name, bad := resolve(in.AccountNumber, in.BankCode)
	if bad != "" {
		writeError(w, http.StatusBadRequest, bad, "", "validation_error",
			"Ensure that you're passing the correct account number and bank code")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rc := &recipient{id: s.st.id(), code: "RCP_" + randCode(15), name: in.Name, typ: in.Type, currency: in.Currency,
		accountNumber: in.AccountNumber, accountName: name, bankCode: in.BankCode, bankName: bank.Name, createdAt: s.cfg.Now()}
	s.st.recipients[rc.code] = rc
	writeJSONStatus(w, http.StatusCreated, "Transfer recipient created successfully", rc.json(s.st.domain), nil)
}

func (s *Sim) initiateTransfer(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Source    string      `json:"source"`
		Amount    json.Number `json:"amount"`
		Recipient string      `json:"recipient"`
		Reference string      `json:"reference"`
		Reason    string      `json:"reason"`
		Currency  string      `json:"currency"`
	}
	if err := decodeBody(r, &in); err != nil {
		writeError(w, http.StatusBadRequest, "Invalid request body", "", "validation_error")
		return
	}
	if in.Source != "balance" {
		writeError(w, http.StatusBadRequest, "Invalid source", "", "validation_error", "Pass balance as the source")
		return
	}
	amount, err := strconv.ParseInt(in.Amount.String(), 10, 64)
	if err != nil || amount <= 0 {
		writeError(w, http.StatusBadRequest, "Invalid amount", "", "validation_error",
			"Pass the amount in kobo as a whole number greater than zero")
		return
	}
	if in.Reference == "" {
		in.Reference = randCode(20)
	}
	if paystack.CheckTransferReference(in.Reference) != nil {
		writeError(w, http.StatusBadRequest, "Transfer reference contains illegal characters", "invalid_reference", "validation_error",
			"Use 16 to 50 lowercase letters, digits, - and _")
		return
	}
	if in.Currency == "" {
		in.Currency = "NGN"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st.transferByRef[in.Reference] != nil {
		writeError(w, http.StatusBadRequest, "Duplicate Transfer Reference", "duplicate_reference", "validation_error",
			"Create a new reference for the new transfer")
		return
	}
	rc := s.st.recipients[in.Recipient]
	if rc == nil {
		writeError(w, http.StatusBadRequest, "Recipient specified is invalid", "invalid_transfer_recipient", "validation_error",
			"Provide a valid recipient. Ensure you are passing the recipient code in the recipient param")
		return
	}
	fee := transferFee(amount)
	if s.st.balance < amount+fee {
		writeError(w, http.StatusBadRequest, "Your balance is not enough to fulfil this request", "insufficient_balance", "validation_error",
			"Top up your balance and try again")
		return
	}
	s.st.balance -= amount + fee
	now := s.cfg.Now()
	t := &transfer{id: s.st.id(), code: "TRF_" + randCode(16), ref: in.Reference, reason: in.Reason, amount: amount,
		fee: fee, currency: in.Currency, status: paystack.TransferPending, recipient: rc, createdAt: now, updatedAt: now}
	s.st.transfers = append(s.st.transfers, t)
	s.st.transferByRef[t.ref] = t
	if status, after := s.st.autoStatus, s.st.autoAfter; status != "" {
		ref := t.ref
		s.background(func() {
			if s.sleep(after) {
				_ = s.SettleTransfer(ref, status)
			}
		})
	}
	writeJSON(w, "Transfer has been queued", t.json(s.st.domain, transferInitiated), nil)
}

func (s *Sim) verifyTransfer(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.st.transferByRef[r.PathValue("ref")]
	if t == nil {
		writeError(w, http.StatusNotFound, "Transfer not found", "", "")
		return
	}
	writeJSON(w, "Transfer retrieved", t.json(s.st.domain, transferFull), nil)
}

func (s *Sim) listTransfers(w http.ResponseWriter, r *http.Request) {
	lw, bad := readWindow(r)
	if bad != "" {
		writeError(w, http.StatusBadRequest, bad, "", "validation_error")
		return
	}
	rcp := r.URL.Query().Get("recipient")
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []map[string]any
	for i := len(s.st.transfers) - 1; i >= 0; i-- {
		t := s.st.transfers[i]
		if lw.keeps(t.createdAt, t.status) && (rcp == "" || rcp == t.recipient.code) {
			all = append(all, t.json(s.st.domain, transferFull))
		}
	}
	items, meta := page(lw, all)
	if items == nil {
		items = []map[string]any{}
	}
	writeJSON(w, "Transfers retrieved", items, meta)
}

// settleable says which outcomes a transfer in a status may still reach.
var settleable = map[string][]string{
	paystack.TransferPending:  {paystack.TransferSuccess, paystack.TransferFailed, paystack.TransferReversed},
	paystack.TransferQueued:   {paystack.TransferSuccess, paystack.TransferFailed, paystack.TransferReversed},
	paystack.TransferReceived: {paystack.TransferSuccess, paystack.TransferFailed, paystack.TransferReversed},
	paystack.TransferOTP:      {paystack.TransferSuccess, paystack.TransferFailed, paystack.TransferReversed},
	paystack.TransferSuccess:  {paystack.TransferReversed},
}

// SettleTransfer gives a transfer its outcome, "success", "failed" or
// "reversed" (a successful transfer may still be reversed), and sends the
// matching event (transfer.success, transfer.failed, transfer.reversed).
// A failed or reversed transfer's amount and fee return to the balance.
func (s *Sim) SettleTransfer(reference, status string) error {
	s.mu.Lock()
	t := s.st.transferByRef[reference]
	if t == nil {
		s.mu.Unlock()
		return fmt.Errorf("paystacksim: no transfer %q", reference)
	}
	ok := false
	for _, to := range settleable[t.status] {
		ok = ok || to == status
	}
	if !ok {
		from := t.status
		s.mu.Unlock()
		return fmt.Errorf("paystacksim: transfer %q is %s: it cannot become %q", reference, from, status)
	}
	now := s.cfg.Now()
	t.status, t.updatedAt = status, now
	if status == paystack.TransferSuccess {
		t.transferredAt = now
	}
	if status == paystack.TransferFailed || status == paystack.TransferReversed {
		s.st.balance += t.amount + t.fee
	}
	data := t.json(s.st.domain, transferEvent)
	s.mu.Unlock()
	s.emit("transfer."+status, data)
	return nil
}
