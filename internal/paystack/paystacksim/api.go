package paystacksim

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/mail"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/escrowd/escrowd/domain/reference"
	"github.com/escrowd/escrowd/internal/paystack"
)

// dedicatedBanks are the preferred_bank slugs a dedicated account can be
// opened at.
var dedicatedBanks = map[string]struct {
	name string
	id   int64
}{
	"wema-bank":      {"Wema Bank", 20},
	"test-bank":      {"Test Bank", 23},
	"titan-paystack": {"Paystack-Titan", 24},
}

func (s *Sim) createCustomer(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Email     string `json:"email"`
		FirstName string `json:"first_name"`
		LastName  string `json:"last_name"`
		Phone     string `json:"phone"`
	}
	if err := decodeBody(r, &in); err != nil {
		writeError(w, http.StatusBadRequest, "Invalid request body", "", "validation_error")
		return
	}
	if _, err := mail.ParseAddress(in.Email); err != nil || in.Email == "" {
		writeError(w, http.StatusBadRequest, "Invalid Email Address Passed", "", "validation_error")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Paystack keeps one customer per email: asked again, it answers that
	// customer, with the names it is given.
	c := s.st.customerByEmail[strings.ToLower(in.Email)]
	if c == nil {
		c = &customer{id: s.st.id(), code: "CUS_" + randCode(15), email: in.Email, createdAt: s.cfg.Now()}
		s.st.customers[c.code] = c
		s.st.customerByEmail[strings.ToLower(in.Email)] = c
	}
	if in.FirstName != "" {
		c.first = in.FirstName
	}
	if in.LastName != "" {
		c.last = in.LastName
	}
	if in.Phone != "" {
		c.phone = in.Phone
	}
	out := c.json()
	out["integration"], out["domain"], out["identified"], out["identifications"] = integrationID, s.st.domain, false, nil
	out["createdAt"], out["updatedAt"] = stamp(c.createdAt), stamp(s.cfg.Now())
	out["transactions"], out["subscriptions"], out["authorizations"] = []any{}, []any{}, []any{}
	writeJSON(w, "Customer created", out, nil)
}

func (s *Sim) findCustomer(ref string) *customer {
	if c := s.st.customers[ref]; c != nil {
		return c
	}
	for _, c := range s.st.customers {
		if strconv.FormatInt(c.id, 10) == ref {
			return c
		}
	}
	return nil
}

func (s *Sim) createDedicatedAccount(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Customer      json.RawMessage `json:"customer"`
		PreferredBank string          `json:"preferred_bank"`
	}
	if err := decodeBody(r, &in); err != nil {
		writeError(w, http.StatusBadRequest, "Invalid request body", "", "validation_error")
		return
	}
	if in.PreferredBank == "" {
		in.PreferredBank = "wema-bank"
		if s.st.domain == "test" {
			in.PreferredBank = "test-bank"
		}
	}
	bank, ok := dedicatedBanks[in.PreferredBank]
	if !ok {
		writeError(w, http.StatusBadRequest, "Invalid preferred bank", "", "validation_error",
			"Pass a preferred_bank slug from the dedicated account providers")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.findCustomer(strings.Trim(string(in.Customer), `"`))
	if c == nil {
		writeError(w, http.StatusNotFound, "Customer not found", "", "validation_error")
		return
	}
	// One dedicated account per customer: asked again, the simulator
	// answers the one it has.
	a := s.st.accountOf[c.code]
	if a == nil {
		s.st.acctSeq++
		serial := fmt.Sprintf("99%07d", s.st.acctSeq)
		check, _ := reference.NUBANCheckDigit("035", serial)
		holder := strings.ToUpper(strings.TrimSpace(c.first + " " + c.last))
		if holder == "" {
			holder = strings.ToUpper(strings.SplitN(c.email, "@", 2)[0])
		}
		a = &account{id: s.st.id(), number: serial + string(check), name: strings.ToUpper(s.cfg.BusinessName) + " / " + holder,
			bankName: bank.name, bankSlug: in.PreferredBank, bankID: bank.id, customer: c, createdAt: s.cfg.Now()}
		s.st.accounts[a.number] = a
		s.st.accountOf[c.code] = a
	}
	writeJSON(w, "NUBAN successfully created", a.json(), nil)
}

// json is a dedicated account as Paystack answers it.
func (a *account) json() map[string]any {
	return map[string]any{
		"bank":         map[string]any{"name": a.bankName, "id": a.bankID, "slug": a.bankSlug},
		"account_name": a.name, "account_number": a.number, "assigned": true, "currency": "NGN",
		"metadata": nil, "active": true, "id": a.id, "created_at": stamp(a.createdAt), "updated_at": stamp(a.createdAt),
		"split_config": nil,
		"assignment": map[string]any{"integration": integrationID, "assignee_id": a.customer.id, "assignee_type": "Customer",
			"expired": false, "account_type": "PAY-WITH-TRANSFER-RECURRING", "assigned_at": stamp(a.createdAt), "expired_at": nil},
		"customer": a.customer.json(),
	}
}

// listDedicatedAccounts is GET /dedicated_account: the integration's
// dedicated accounts, newest first, filtered by customer (code or id) and
// currency when asked.
func (s *Sim) listDedicatedAccounts(w http.ResponseWriter, r *http.Request) {
	lw, bad := readWindow(r)
	if bad != "" {
		writeError(w, http.StatusBadRequest, bad, "", "validation_error")
		return
	}
	q := r.URL.Query()
	s.mu.Lock()
	defer s.mu.Unlock()
	var want *customer
	if c := q.Get("customer"); c != "" {
		if want = s.findCustomer(c); want == nil {
			writeJSON(w, "Managed accounts successfully retrieved", []map[string]any{}, map[string]any{"total": 0,
				"skipped": 0, "perPage": lw.perPage, "page": lw.page, "pageCount": 0})
			return
		}
	}
	var accts []*account
	for _, a := range s.st.accounts {
		if (want == nil || a.customer == want) && (q.Get("currency") == "" || q.Get("currency") == "NGN") {
			accts = append(accts, a)
		}
	}
	slices.SortFunc(accts, func(a, b *account) int { return int(b.id - a.id) })
	all := make([]map[string]any, len(accts))
	for i, a := range accts {
		all[i] = a.json()
	}
	items, meta := page(lw, all)
	if items == nil {
		items = []map[string]any{}
	}
	writeJSON(w, "Managed accounts successfully retrieved", items, meta)
}

// checkoutChannels are the channels a checkout can be paid with.
var checkoutChannels = []string{"card", "bank", "ussd", "qr", "mobile_money", "bank_transfer", "eft"}

func (s *Sim) initializeTransaction(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Email       string          `json:"email"`
		Amount      json.Number     `json:"amount"`
		Reference   string          `json:"reference"`
		CallbackURL string          `json:"callback_url"`
		Channels    []string        `json:"channels"`
		Currency    string          `json:"currency"`
		Metadata    json.RawMessage `json:"metadata"`
	}
	if err := decodeBody(r, &in); err != nil {
		writeError(w, http.StatusBadRequest, "Invalid request body", "", "validation_error")
		return
	}
	if _, err := mail.ParseAddress(in.Email); err != nil {
		writeError(w, http.StatusBadRequest, "Invalid Email Address Passed", "", "validation_error")
		return
	}
	amount, err := strconv.ParseInt(in.Amount.String(), 10, 64)
	if err != nil || amount <= 0 {
		writeError(w, http.StatusBadRequest, "Invalid Amount Sent", "", "validation_error")
		return
	}
	for _, ch := range in.Channels {
		if !slices.Contains(checkoutChannels, ch) {
			writeError(w, http.StatusBadRequest, "Invalid channel "+ch, "", "validation_error")
			return
		}
	}
	if in.Currency == "" {
		in.Currency = "NGN"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if in.Reference == "" {
		in.Reference = randCode(10)
	}
	if s.st.txnByRef[in.Reference] != nil {
		writeError(w, http.StatusBadRequest, "Duplicate Transaction Reference", "duplicate_reference", "validation_error",
			"Try and create the Transaction or Charge with a new reference")
		return
	}
	c := s.st.customerByEmail[strings.ToLower(in.Email)]
	if c == nil {
		c = &customer{id: s.st.id(), code: "CUS_" + randCode(15), email: in.Email, createdAt: s.cfg.Now()}
		s.st.customers[c.code] = c
		s.st.customerByEmail[strings.ToLower(in.Email)] = c
	}
	// An initialized transaction nobody has paid answers "abandoned".
	t := &txn{id: s.st.id(), ref: in.Reference, accessCode: randCode(15), amount: amount, currency: in.Currency,
		status: "abandoned", gateway: "The transaction was not completed", customer: c,
		callbackURL: in.CallbackURL, channels: in.Channels, ipAddress: remoteHost(r), createdAt: s.cfg.Now()}
	if len(in.Metadata) > 0 && string(in.Metadata) != "null" {
		t.metadata = in.Metadata
	}
	s.st.txns = append(s.st.txns, t)
	s.st.txnByRef[t.ref] = t
	s.st.txnByAccess[t.accessCode] = t
	writeJSON(w, "Authorization URL created", map[string]any{
		"authorization_url": baseURL(r) + "/_sim/checkout/" + t.accessCode,
		"access_code":       t.accessCode, "reference": t.ref,
	}, nil)
}

// baseURL is the simulator's address as the request reached it.
// remoteHost is the address a request came from, without its port.
func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func (s *Sim) verifyTransaction(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.st.txnByRef[r.PathValue("ref")]
	if t == nil {
		writeError(w, http.StatusBadRequest, "Transaction reference not found", "transaction_not_found", "validation_error",
			"Ensure that you're passing the reference of a transaction that exists on this integration")
		return
	}
	writeJSON(w, "Verification successful", t.json(s.st.domain), nil)
}

// listWindow reads a listing's from, to, page and perPage.
type listWindow struct {
	from, to      time.Time
	status        string
	page, perPage int
}

func readWindow(r *http.Request) (listWindow, string) {
	q := r.URL.Query()
	lw := listWindow{status: q.Get("status"), page: 1, perPage: 50}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"from", &lw.from}, {"to", &lw.to}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			if t, err = time.Parse("2006-01-02", v); err != nil {
				return lw, "Invalid date format for " + p.name + " param"
			}
		}
		*p.dst = t
	}
	per := q.Get("perPage")
	if per == "" {
		per = q.Get("per_page")
	}
	if per != "" {
		n, err := strconv.Atoi(per)
		if err != nil || n <= 0 {
			return lw, "Invalid perPage"
		}
		lw.perPage = min(n, 100)
	}
	if p := q.Get("page"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 {
			return lw, "Invalid page"
		}
		lw.page = n
	}
	return lw, ""
}

func (lw listWindow) keeps(created time.Time, status string) bool {
	return (lw.from.IsZero() || !created.Before(lw.from)) && (lw.to.IsZero() || !created.After(lw.to)) &&
		(lw.status == "" || lw.status == status)
}

// page cuts one page of items (newest first, as Paystack lists) and its meta.
func page[T any](lw listWindow, items []T) ([]T, map[string]any) {
	total := len(items)
	start := min((lw.page-1)*lw.perPage, total)
	end := min(start+lw.perPage, total)
	count := (total + lw.perPage - 1) / lw.perPage
	return items[start:end], map[string]any{"total": total, "skipped": start, "perPage": lw.perPage,
		"page": lw.page, "pageCount": count}
}

func (s *Sim) listTransactions(w http.ResponseWriter, r *http.Request) {
	lw, bad := readWindow(r)
	if bad != "" {
		writeError(w, http.StatusBadRequest, bad, "", "validation_error")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []map[string]any
	for i := len(s.st.txns) - 1; i >= 0; i-- {
		if t := s.st.txns[i]; lw.keeps(t.createdAt, t.status) {
			all = append(all, t.json(s.st.domain))
		}
	}
	var volume int64
	for i := len(s.st.txns) - 1; i >= 0; i-- {
		if t := s.st.txns[i]; t.status == paystack.TransactionSuccess && lw.keeps(t.createdAt, t.status) {
			volume += t.amount
		}
	}
	items, meta := page(lw, all)
	if items == nil {
		items = []map[string]any{}
	}
	for _, it := range items {
		// A listed transaction carries its metadata and plan as objects
		// (verify answers "" and null for none).
		if it["metadata"] == "" {
			it["metadata"] = map[string]any{}
		}
		if it["plan"] == nil {
			it["plan"] = map[string]any{}
		}
	}
	meta["total_volume"] = volume
	writeJSON(w, "Transactions retrieved", items, meta)
}

// resolve names the holder of an account, or says why it cannot:
// the bank must be in the reference table of banks; the number 10 digits;
// a number ending in 9999 never resolves; at a deposit money bank (3-digit
// CBN code) the NUBAN check digit must hold.
func resolve(accountNumber, bankCode string) (reference.Bank, string, string) {
	bank, ok := reference.FindBank(bankCode)
	if !ok {
		return bank, "", "Unknown bank code: " + bankCode
	}
	if len(accountNumber) != 10 || strings.Trim(accountNumber, "0123456789") != "" ||
		strings.HasSuffix(accountNumber, "9999") ||
		(len(bank.Code) == 3 && !reference.ValidNUBAN(bank.Code, accountNumber)) {
		return bank, "", "Could not resolve account name. Check parameters or try again."
	}
	return bank, reference.TestAccountName(bank.Code, accountNumber), ""
}

func (s *Sim) resolveAccount(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	acct, code := q.Get("account_number"), q.Get("bank_code")
	if acct == "" || code == "" {
		writeError(w, http.StatusBadRequest, "Account number and bank code are required", "", "validation_error")
		return
	}
	bank, name, bad := resolve(acct, code)
	if bad != "" {
		writeError(w, http.StatusUnprocessableEntity, bad, "", "validation_error",
			"Ensure that you're passing the correct account number and bank code")
		return
	}
	writeJSON(w, "Account number resolved", map[string]any{"account_number": acct, "account_name": name,
		"bank_id": bankID(bank)}, nil)
}

// bankID is a bank's id in the simulated list: its place in the table.
func bankID(b reference.Bank) int {
	for i, x := range reference.Banks {
		if x.Code == b.Code {
			return i + 1
		}
	}
	return 0
}

func (s *Sim) listBanks(w http.ResponseWriter, r *http.Request) {
	lw, bad := readWindow(r)
	if bad != "" {
		writeError(w, http.StatusBadRequest, bad, "", "validation_error")
		return
	}
	if c := r.URL.Query().Get("currency"); c != "" && c != "NGN" {
		writeJSON(w, "Banks retrieved", []any{}, map[string]any{"total": 0, "skipped": 0, "perPage": lw.perPage, "page": lw.page, "pageCount": 0})
		return
	}
	nip := r.URL.Query().Get("include_nip_sort_code") == "true"
	var all []map[string]any
	for i, b := range reference.Banks {
		m := map[string]any{
			"id": i + 1, "name": b.Name, "slug": slug(b.Name), "code": b.Code, "longcode": "", "gateway": nil,
			"pay_with_bank": false, "supports_transfer": true, "available_for_direct_debit": false,
			"active": true, "is_deleted": false, "country": "Nigeria", "currency": "NGN", "type": "nuban",
			"createdAt": "2020-01-01T00:00:00.000Z", "updatedAt": "2020-01-01T00:00:00.000Z",
		}
		if nip {
			m["nip_sort_code"] = b.NIPCode
		}
		all = append(all, m)
	}
	items, meta := page(lw, all)
	writeJSON(w, "Banks retrieved", items, meta)
}

func slug(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}

// channelOK reports whether a checkout may be completed with channel.
func channelOK(t *txn, channel string) bool {
	if !slices.Contains([]string{paystack.ChannelCard, paystack.ChannelBank, paystack.ChannelUSSD, paystack.ChannelBankTransfer}, channel) {
		return false
	}
	return len(t.channels) == 0 || slices.Contains(t.channels, channel)
}
