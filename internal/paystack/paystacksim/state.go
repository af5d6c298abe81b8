package paystacksim

import (
	"encoding/json"
	"strings"
	"time"
)

// integrationID is the simulated integration's id.
const integrationID = 100001

// state is everything the simulator remembers; Sim.mu guards it.
type state struct {
	domain  string // "test" or "live", from the key
	balance int64  // kobo
	nextID  int64

	customers       map[string]*customer // by code
	customerByEmail map[string]*customer
	accounts        map[string]*account // by account number
	accountOf       map[string]*account // by customer code
	acctSeq         int

	txns        []*txn
	txnByRef    map[string]*txn
	txnByAccess map[string]*txn

	recipients    map[string]*recipient // by code
	transfers     []*transfer
	transferByRef map[string]*transfer

	deliveries []*Delivery

	faults     map[string][]fault
	duplicate  bool
	suppress   bool
	forgeNext  int
	lies       []lie
	autoStatus string // "" when transfers settle only by SettleTransfer
	autoAfter  time.Duration
}

func newState(cfg Config) state {
	domain := "test"
	if strings.HasPrefix(cfg.SecretKey, "sk_live_") {
		domain = "live"
	}
	return state{
		domain: domain, balance: cfg.Balance, nextID: 1000,
		customers: map[string]*customer{}, customerByEmail: map[string]*customer{},
		accounts: map[string]*account{}, accountOf: map[string]*account{},
		txnByRef: map[string]*txn{}, txnByAccess: map[string]*txn{},
		recipients: map[string]*recipient{}, transferByRef: map[string]*transfer{},
		faults:     map[string][]fault{},
		autoStatus: "success", autoAfter: cfg.SettleAfter,
	}
}

func (st *state) id() int64 { st.nextID++; return st.nextID }

type customer struct {
	id                       int64
	code, email, first, last string
	phone                    string
	createdAt                time.Time
}

type account struct {
	id                 int64
	number, name       string
	bankName, bankSlug string
	bankID             int64
	customer           *customer
	createdAt          time.Time
}

type txn struct {
	id               int64
	ref, accessCode  string
	amount, fees     int64
	currency, status string
	channel, gateway string
	customer         *customer
	callbackURL      string
	// ipAddress is where the payment came from: the integrator's server
	// that initialized it, then the payer's browser on the payment page.
	ipAddress             string
	channels              []string
	metadata              json.RawMessage
	paidAt, createdAt     time.Time
	receiverAccount       string
	receiverBank          string
	senderName, senderAcc string
	senderBank            string
	authCode              string
}

type recipient struct {
	id                         int64
	code, name, typ, currency  string
	accountNumber, accountName string
	bankCode, bankName         string
	createdAt                  time.Time
}

type transfer struct {
	id                   int64
	code, ref, reason    string
	amount, fee          int64
	currency, status     string
	recipient            *recipient
	createdAt, updatedAt time.Time
	transferredAt        time.Time
}

// stamp formats a time as Paystack does, or null.
func stamp(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// Fees, in kobo, rounded half up, as Paystack's published Nigerian pricing
// sets them.

// dedicatedAccountFee: 1% of a transfer into a dedicated account, capped
// at ₦300.
func dedicatedAccountFee(amount int64) int64 {
	return min((amount+50)/100, 30_000)
}

// localFee: 1.5% + ₦100 of a local card, bank or USSD payment, the ₦100
// waived under ₦2,500, capped at ₦2,000.
func localFee(amount int64) int64 {
	fee := (amount*15 + 500) / 1000
	if amount >= 250_000 {
		fee += 10_000
	}
	return min(fee, 200_000)
}

// transferFee: ₦10 up to ₦5,000, ₦25 up to ₦50,000, ₦50 above.
func transferFee(amount int64) int64 {
	switch {
	case amount <= 500_000:
		return 1_000
	case amount <= 5_000_000:
		return 2_500
	default:
		return 5_000
	}
}

func (c *customer) json() map[string]any {
	if c == nil {
		return nil
	}
	return map[string]any{
		"id": c.id, "first_name": nullable(c.first), "last_name": nullable(c.last), "email": c.email,
		"customer_code": c.code, "phone": nullable(c.phone), "metadata": nil, "risk_action": "default",
		"international_format_phone": nil,
	}
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// json renders a transaction as verify, listings and charge events do.
func (t *txn) json(domain string) map[string]any {
	auth := map[string]any{
		"authorization_code": nullable(t.authCode), "bin": nil, "last4": nil, "exp_month": nil, "exp_year": nil,
		"channel": nullable(t.channel), "card_type": nil, "bank": nil, "country_code": "NG", "brand": nil,
		"reusable": false, "signature": nil, "account_name": nil,
		"receiver_bank_account_number": nil, "receiver_bank": nil,
	}
	switch t.channel {
	case "card":
		auth["bin"], auth["last4"], auth["exp_month"], auth["exp_year"] = "408408", "4081", "12", "2030"
		auth["card_type"], auth["bank"], auth["brand"], auth["reusable"] = "visa ", "TEST BANK", "visa", true
		auth["signature"] = "SIG_" + t.authCode
	case "dedicated_nuban", "bank_transfer":
		auth["bin"], auth["last4"] = "000XXX", "X"+lastN(t.senderAcc, 3)
		auth["card_type"], auth["bank"], auth["brand"] = "transfer", nullable(t.senderBank), "Managed Account"
		auth["sender_bank"], auth["sender_bank_account_number"] = nullable(t.senderBank), maskAccount(t.senderAcc)
		auth["sender_country"], auth["sender_name"] = "NG", nullable(t.senderName)
		auth["narration"] = "NIP: " + t.senderName + " -" + t.ref
		auth["receiver_bank_account_number"], auth["receiver_bank"] = nullable(t.receiverAccount), nullable(t.receiverBank)
	case "bank", "ussd":
		auth["bank"], auth["card_type"] = "Guaranty Trust Bank", t.channel
	}
	if t.status != "success" {
		auth = map[string]any{}
	}
	meta := any("")
	if len(t.metadata) > 0 {
		meta = t.metadata
	}
	var fees any
	if t.status == "success" {
		fees = t.fees
	}
	return map[string]any{
		"id": t.id, "domain": domain, "status": t.status, "reference": t.ref, "receipt_number": nil,
		"amount": t.amount, "message": nil, "gateway_response": t.gateway,
		"paid_at": stamp(t.paidAt), "created_at": stamp(t.createdAt), "channel": t.channel,
		"currency": t.currency, "ip_address": nullable(t.ipAddress), "metadata": meta, "log": nil,
		"fees": fees, "fees_split": nil, "authorization": auth, "customer": t.customer.json(),
		"plan": nil, "split": map[string]any{}, "order_id": nil,
		"paidAt": stamp(t.paidAt), "createdAt": stamp(t.createdAt), "requested_amount": t.amount,
		"pos_transaction_data": nil, "source": nil, "fees_breakdown": nil, "connect": nil,
		"transaction_date": stamp(t.createdAt), "plan_object": map[string]any{}, "subaccount": map[string]any{},
	}
}

func lastN(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

func maskAccount(s string) any {
	if s == "" {
		return nil
	}
	return strings.Repeat("X", max(len(s)-4, 0)) + lastN(s, 4)
}

func (r *recipient) json(domain string) map[string]any {
	return map[string]any{
		"active": true, "createdAt": stamp(r.createdAt), "currency": r.currency, "description": "",
		"domain": domain, "email": nil, "id": r.id, "integration": integrationID, "metadata": nil,
		"name": r.name, "recipient_code": r.code, "type": r.typ, "updatedAt": stamp(r.createdAt),
		"is_deleted": false, "isDeleted": false,
		"details": map[string]any{
			"authorization_code": nil, "account_number": r.accountNumber, "account_name": nullable(r.accountName),
			"bank_code": r.bankCode, "bank_name": r.bankName,
		},
	}
}

// The shapes a transfer takes: initiate's answer names its recipient by
// id; verify and listings carry the recipient; events also carry the
// integration as an object.
const (
	transferInitiated = iota
	transferFull
	transferEvent
)

func (t *transfer) json(domain string, form int) map[string]any {
	m := map[string]any{
		"amount": t.amount, "createdAt": stamp(t.createdAt), "currency": t.currency, "domain": domain,
		"failures": nil, "id": t.id, "integration": integrationID, "reason": t.reason, "reference": t.ref,
		"source": "balance", "source_details": nil, "status": t.status, "titan_code": nil,
		"transfer_code": t.code, "request": t.id + 7_000_000, "transferred_at": stamp(t.transferredAt),
		"updatedAt": stamp(t.updatedAt),
	}
	switch form {
	case transferInitiated:
		m["recipient"] = t.recipient.id
		m["transfersessionid"], m["transfertrials"] = []any{}, []any{}
	default:
		m["recipient"] = t.recipient.json(domain)
		m["session"] = map[string]any{"provider": nil, "id": nil}
		m["fee_charged"] = t.fee
		m["fees_breakdown"] = nil
		m["gateway_response"] = nil
		if t.status == "success" || t.status == "reversed" {
			m["session"] = map[string]any{"provider": "nip", "id": "1100002" + t.code[4:]}
		}
	}
	if form == transferEvent {
		m["integration"] = map[string]any{"id": integrationID, "is_live": domain == "live", "business_name": "Escrowd Sim"}
	}
	return m
}
