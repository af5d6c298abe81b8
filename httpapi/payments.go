package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/projections"
)

// historyCeiling is the page-size ceiling of payment history and the
// merchant ledger.
const historyCeiling = 100

func (s *Server) paymentRoutes() {
	cid := Policy{CID: CIDRequired}
	sa := Policy{CID: CIDForbidden, SuperAdmin: true}
	s.handle(http.MethodGet, "/v1/wallet", cid, s.getWallet)
	s.handle(http.MethodPost, "/v1/payment/topup", cid, s.topUp)
	s.handle(http.MethodPost, "/v1/payment/create-intent", cid, s.createIntent)
	s.handle(http.MethodPost, "/v1/payment/verify", cid, s.verifyPayments)
	s.handle(http.MethodPost, "/v1/payment/verify-account", cid, s.verifyAccount)
	s.handle(http.MethodGet, "/v1/payment/history", cid, s.paymentHistory)
	s.handle(http.MethodGet, "/v1/merchant/balance", sa, s.merchantBalance)
	s.handle(http.MethodGet, "/v1/merchant/transactions", sa, s.merchantTransactions)
}

// amountOf parses a decimal money field with a message naming the rule
// that failed.
func amountOf(field string, in money.Input) (money.Amount, error) {
	if !in.Present() {
		return 0, domain.Invalidf("%s is required", field)
	}
	a, err := in.Decimal()
	switch {
	case errors.Is(err, money.ErrPrecision):
		return 0, domain.Invalidf("%s must have at most 2 decimal places", field)
	case errors.Is(err, money.ErrRange):
		return 0, domain.Invalidf("%s is too large", field)
	case err != nil:
		return 0, domain.Invalidf("%s must be a number", field)
	}
	return a, nil
}

func (s *Server) getWallet(c echo.Context) error {
	p, _ := PrincipalFrom(c)
	cu, _ := CustomerFrom(c)
	q, err := s.readModels(c, projections.LedgerName)
	if err != nil {
		return err
	}
	b, err := q.Balances(c.Request().Context(), p.MerchantID, p.Environment, ledger.HolderCustomer, cu.ID)
	if err != nil {
		return err
	}
	out := map[string]any{"customerId": cu.ID, "mainBalance": b.Main, "escrowBalance": b.Escrow, "currency": ledger.Currency}
	// Once opened (by the customer's first deposit through the provider),
	// the dedicated account customers transfer deposits into.
	acct, err := s.app.KnownDepositAccount(c.Request().Context(), cu.ID)
	if err != nil {
		return err
	}
	if acct != nil {
		out["depositAccount"] = acct
	}
	return respond(c, http.StatusOK, "Wallet fetched successfully", out)
}

func (s *Server) topUp(c echo.Context) error {
	var body struct {
		Amount money.Input `json:"amount"`
	}
	if err := decodeJSON(c, &body); err != nil {
		return err
	}
	p, _ := PrincipalFrom(c)
	if p.Environment != domain.Test {
		return domain.Errorf(domain.Forbidden, "This route is only available on staging environment")
	}
	amount, err := amountOf("amount", body.Amount)
	if err != nil {
		return err
	}
	cu, _ := CustomerFrom(c)
	res, err := s.app.TopUpWallet(c.Request().Context(), actor(c), cu.ID, amount)
	if err != nil {
		return err
	}
	return respond(c, http.StatusOK, "Wallet topped up successfully", struct {
		ledger.Record
		MainBalance money.Amount `json:"mainBalance"`
	}{res.Record, res.MainBalance})
}

type intentBody struct {
	Amount            money.Input               `json:"amount"`
	Reference         string                    `json:"reference"`
	TransactionType   string                    `json:"transactionType"`
	Currency          *string                   `json:"currency"`
	Narration         string                    `json:"narration"`
	DepositDetails    json.RawMessage           `json:"depositDetails"`
	WithdrawalDetails *ledger.WithdrawalDetails `json:"withdrawalDetails"`
	BlockchainDetails *ledger.BlockchainDetails `json:"blockchainDetails"`
	WalletDetails     *struct {
		Phone     string `json:"phone"`
		Narration string `json:"narration"`
	} `json:"walletDetails"`
	EscrowDetails json.RawMessage `json:"escrowDetails"`
	// Gateway pays an escrow at the provider: card, bank or ussd
	// (wallet, or none, from the wallet).
	Gateway string `json:"gateway"`
}

// intentResponse is a transaction record, with a deposit's payment
// instructions on test.
type intentResponse struct {
	ledger.Record
	TestAccount      *payment.TestAccount `json:"testAccount,omitempty"`
	DepositAccount   *payment.BankAccount `json:"depositAccount,omitempty"`
	AuthorizationURL string               `json:"authorizationUrl,omitempty"`
}

func (b intentBody) request() (app.IntentRequest, error) {
	var r app.IntentRequest
	if strings.TrimSpace(b.TransactionType) == "" {
		return r, domain.Invalidf("transactionType is required")
	}
	r.Type = ledger.Type(transactionTypeEnum.canonical(b.TransactionType))
	switch r.Type {
	case ledger.Deposit, ledger.Withdrawal, ledger.WalletTransfer:
	case ledger.EscrowPayment:
		ids, err := escrowIDsOf(b.EscrowDetails)
		if err != nil {
			return r, err
		}
		r.EscrowIDs = ids
		if g := strings.ToLower(strings.TrimSpace(b.Gateway)); g != "wallet" {
			r.Gateway = g
		}
	default:
		return r, domain.Invalidf("transactionType must be one of deposit, withdrawal, wallet_transfer, escrow")
	}
	if err := ledger.ValidClientReference(b.Reference); err != nil {
		return r, err
	}
	r.Reference = b.Reference
	amount, err := amountOf("amount", b.Amount)
	if err != nil {
		return r, err
	}
	if amount < payment.MinAmount && r.Type != ledger.EscrowPayment {
		return r, domain.Invalidf("amount must be at least %s", payment.MinAmount)
	}
	r.Amount = amount
	if b.Currency != nil && *b.Currency != ledger.Currency {
		return r, domain.Invalidf("currency must be NGN")
	}
	if len(b.Narration) > 200 {
		return r, domain.Invalidf("narration must be at most 200 characters")
	}
	r.Narration = b.Narration
	switch r.Type {
	case ledger.Withdrawal:
		if w := b.WithdrawalDetails; w != nil {
			if w.AccountNumber == "" {
				return r, domain.Invalidf("withdrawalDetails.accountNumber is required")
			}
			if w.BankCode == "" {
				return r, domain.Invalidf("withdrawalDetails.bankCode is required")
			}
			if len(w.Narration) > 200 || len(w.AccountName) > 200 {
				return r, domain.Invalidf("withdrawalDetails fields must be at most 200 characters")
			}
			r.Withdrawal = &ledger.WithdrawalDetails{AccountName: w.AccountName, AccountNumber: w.AccountNumber,
				BankCode: w.BankCode, BankName: w.BankName, Narration: w.Narration}
		}
		if bc := b.BlockchainDetails; bc != nil {
			r.Blockchain = &ledger.BlockchainDetails{ToAddress: bc.ToAddress, Network: bc.Network}
		}
	case ledger.WalletTransfer:
		if b.WalletDetails == nil || strings.TrimSpace(b.WalletDetails.Phone) == "" {
			return r, domain.Invalidf("walletDetails.phone is required")
		}
		if len(b.WalletDetails.Narration) > 200 {
			return r, domain.Invalidf("walletDetails.narration must be at most 200 characters")
		}
		r.Wallet = &ledger.WalletDetails{Phone: b.WalletDetails.Phone, Narration: b.WalletDetails.Narration}
		if r.Narration == "" {
			r.Narration = b.WalletDetails.Narration
		}
	}
	return r, nil
}

func (s *Server) createIntent(c echo.Context) error {
	var body intentBody
	if err := decodeJSON(c, &body); err != nil {
		return err
	}
	req, err := body.request()
	if err != nil {
		return err
	}
	cu, _ := CustomerFrom(c)
	req.CallbackURL = s.checkoutReturnURL()
	res, err := s.app.CreateIntent(c.Request().Context(), actor(c), cu.ID, cu.Permissions, req)
	if err != nil {
		return err
	}
	return respond(c, http.StatusCreated, "Payment intent created successfully",
		intentResponse{Record: res.Record, TestAccount: res.TestAccount, DepositAccount: res.DepositAccount, AuthorizationURL: res.AuthorizationURL})
}

// maxBatchVerify bounds one verify call's references.
const maxBatchVerify = 50

func (s *Server) verifyPayments(c echo.Context) error {
	var body struct {
		Reference  *string   `json:"reference"`
		References *[]string `json:"references"`
		OTP        any       `json:"otp"` // accepted; no OTP step on this service
	}
	if err := decodeJSON(c, &body); err != nil {
		return err
	}
	var refs []string
	switch {
	case body.Reference != nil && body.References != nil:
		return domain.Invalidf("Send either reference or references, not both")
	case body.Reference != nil:
		if strings.TrimSpace(*body.Reference) == "" {
			return domain.Invalidf("reference is required")
		}
		refs = []string{*body.Reference}
	case body.References != nil:
		refs = *body.References
		if len(refs) == 0 {
			return domain.Invalidf("references must be a non-empty array of strings")
		}
		if len(refs) > maxBatchVerify {
			return domain.Invalidf("references must hold at most %d references", maxBatchVerify)
		}
	default:
		return domain.Invalidf("reference is required")
	}
	ctx := c.Request().Context()
	a := actor(c)
	cu, _ := CustomerFrom(c)
	if body.Reference != nil {
		rec, _, err := s.app.Verify(ctx, a, cu.ID, cu.Permissions, refs[0])
		if err != nil {
			return err
		}
		return respond(c, http.StatusOK, "Payment verified successfully", rec)
	}
	seen := map[string]bool{}
	for _, ref := range refs {
		if seen[ref] {
			return domain.Invalidf("references must not repeat a reference")
		}
		seen[ref] = true
	}
	// Each reference runs on its own and has its own entry: one refused
	// must not turn the answer into an error that hides what the others
	// moved.
	entries := make([]any, 0, len(refs))
	for _, ref := range refs {
		rec, _, err := s.app.Verify(ctx, a, cu.ID, cu.Permissions, ref)
		if err != nil {
			entries = append(entries, s.verifyRefusal(c, ref, err))
			continue
		}
		entries = append(entries, rec)
	}
	return respond(c, http.StatusOK, "Payments verified successfully", entries)
}

// verifyFailure is a batch verify's entry for a reference that was
// refused (or failed: an internal error is logged and shown as one).
type verifyFailure struct {
	Reference string `json:"reference"`
	Status    string `json:"status"`
	Message   string `json:"message"`
}

func (s *Server) verifyRefusal(c echo.Context, ref string, err error) verifyFailure {
	var de *domain.Error
	if !errors.As(err, &de) {
		s.log.Error("batch verify", zap.String("reference", ref), zap.Error(err), reqField(c))
	}
	return verifyFailure{Reference: ref, Status: "error", Message: domain.ErrorMessage(err)}
}

func (s *Server) verifyAccount(c echo.Context) error {
	var body struct {
		AccountNumber string `json:"accountNumber"`
		BankCode      string `json:"bankCode"`
		BankName      string `json:"bankName"`
	}
	if err := decodeJSON(c, &body); err != nil {
		return err
	}
	if body.AccountNumber == "" {
		return domain.Invalidf("accountNumber is required")
	}
	if body.BankCode == "" {
		return domain.Invalidf("bankCode is required")
	}
	p, _ := PrincipalFrom(c)
	name, err := s.app.ResolveAccount(c.Request().Context(), p.Environment, body.BankCode, body.AccountNumber)
	if err != nil {
		return err
	}
	return respond(c, http.StatusOK, "Account details retrieved successfully", map[string]string{
		"accountName": name, "accountNumber": body.AccountNumber, "bankCode": body.BankCode})
}

// transactionFilter reads the history query; flat reports whether the
// caller asked for an unpaged array (reference, fromDate or toDate given).
func transactionFilter(c echo.Context, f projections.TransactionFilter) (projections.TransactionFilter, bool, error) {
	if t := strings.TrimSpace(c.QueryParam("type")); t != "" {
		for _, v := range strings.Split(t, ",") {
			if v = strings.TrimSpace(v); v != "" {
				f.Types = append(f.Types, transactionTypeEnum.canonical(v))
			}
		}
	}
	f.Reference = c.QueryParam("reference")
	var err error
	if f.From, f.To, err = dateRange(c); err != nil {
		return f, false, err
	}
	return f, f.Reference != "" || f.From != nil || f.To != nil, nil
}

// dateRange reads the fromDate and toDate query parameters (nil when
// absent); toDate is an exclusive bound (see parseDateBound).
func dateRange(c echo.Context) (from, to *time.Time, err error) {
	for _, d := range []struct {
		name string
		dst  **time.Time
		end  bool
	}{{"fromDate", &from, false}, {"toDate", &to, true}} {
		raw := c.QueryParam(d.name)
		if raw == "" {
			continue
		}
		t, err := parseDateBound(raw, d.end)
		if err != nil {
			return nil, nil, domain.Invalidf("%s must be a date (YYYY-MM-DD) or an RFC 3339 time", d.name)
		}
		*d.dst = &t
	}
	return from, to, nil
}

// parseDateBound reads YYYY-MM-DD or RFC 3339. As an end bound, a date is
// inclusive: the bound is the next midnight (UTC).
func parseDateBound(raw string, end bool) (time.Time, error) {
	if t, err := time.Parse("2006-01-02", raw); err == nil {
		if end {
			t = t.AddDate(0, 0, 1)
		}
		return t, nil
	}
	t, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		return t, err
	}
	if end {
		// An instant is an inclusive end: include records at that instant.
		t = t.Add(time.Nanosecond)
	}
	return t.UTC(), nil
}

func (s *Server) listTransactions(c echo.Context, f projections.TransactionFilter, msg string) error {
	f, flat, err := transactionFilter(c, f)
	if err != nil {
		return err
	}
	q, err := s.readModels(c, projections.LedgerName)
	if err != nil {
		return err
	}
	if flat {
		return streamFlat(c, msg, func(each func([]byte) error) error {
			return q.EachTransaction(c.Request().Context(), f, each)
		})
	}
	rows, pg, err := q.Transactions(c.Request().Context(), f, pageParams(c, historyCeiling))
	if err != nil {
		return err
	}
	return respond(c, http.StatusOK, msg, map[string]any{"data": rows, "pagination": pg})
}

func (s *Server) paymentHistory(c echo.Context) error {
	p, _ := PrincipalFrom(c)
	cu, _ := CustomerFrom(c)
	return s.listTransactions(c, projections.TransactionFilter{MerchantID: p.MerchantID, Environment: p.Environment, CustomerID: cu.ID},
		"Transaction history fetched successfully")
}

func (s *Server) merchantTransactions(c echo.Context) error {
	p, _ := PrincipalFrom(c)
	return s.listTransactions(c, projections.TransactionFilter{MerchantID: p.MerchantID, Environment: p.Environment},
		"Merchant transactions fetched successfully")
}

func (s *Server) merchantBalance(c echo.Context) error {
	p, _ := PrincipalFrom(c)
	q, err := s.readModels(c, projections.LedgerName)
	if err != nil {
		return err
	}
	b, err := q.Balances(c.Request().Context(), p.MerchantID, p.Environment, ledger.HolderMerchant, p.MerchantID)
	if err != nil {
		return err
	}
	return respond(c, http.StatusOK, "Merchant balance fetched successfully", map[string]any{
		"mainBalance": b.Main, "escrowBalance": b.Escrow, "currency": ledger.Currency})
}

// escrowIDsOf reads escrowDetails.escrowId: one id or an array of ids.
func escrowIDsOf(raw json.RawMessage) ([]string, error) {
	var d struct {
		EscrowID json.RawMessage `json:"escrowId"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &d) != nil || len(d.EscrowID) == 0 || string(d.EscrowID) == "null" {
		return nil, domain.Invalidf("escrowDetails.escrowId is required")
	}
	var one string
	if json.Unmarshal(d.EscrowID, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	if json.Unmarshal(d.EscrowID, &many) != nil || len(many) == 0 {
		return nil, domain.Invalidf("escrowDetails.escrowId must be an escrow id or an array of escrow ids")
	}
	return many, nil
}
