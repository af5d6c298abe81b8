package app

import (
	"encoding/json"
	"math"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/category"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/domain/whitelist"
)

// fieldCaps is the largest value each text field of an event may hold, in
// characters, and the most elements of each list or map: the caps the
// commands enforce (or the size of what the service itself writes there:
// ids, tokens, digests). A field added to an event without an entry here
// fails TestEveryEventFitsItsBound, so no field reaches the log uncapped.
var fieldCaps = map[string]int{
	// ids, tokens and references the service issues or checks
	"category.Created.CategoryID": 64, "category.Created.MerchantID": 64, "category.OrderSet.MerchantID": 64,
	"checkout.Opened.CustomerID": 255, "checkout.Opened.EscrowID": 64, "checkout.Opened.FormToken": 64,
	"checkout.Opened.ID": 64, "checkout.Opened.MerchantID": 64, "checkout.Opened.PaymentToken": 64,
	"checkout.Paid.PaymentID": 64, "checkout.Paid.Reference": 100,
	"customer.Created.CustomerID": 255, "customer.Created.MerchantID": 64, "customer.Created.CountryID": 64,
	"customer.ReservationReleased.Holder": 64, "customer.ReservationTaken.Holder": 64,
	"escrow.Created.Channel": 32, "escrow.Created.ID": 64, "escrow.Created.MerchantID": 64, "escrow.Created.ParentID": 64,
	"escrow.Created.PaymentToken": 64, "escrow.Created.SellerID": 255,
	"escrow.DisputeEntry.Type": 32, "escrow.DisputeEntry.UserID": 255, "escrow.DisputeResolved.ResolvedBy": 255,
	"escrow.Funded.BuyerID": 255, "escrow.Funded.PaymentID": 64, "escrow.Milestone.CustomerID": 255, "escrow.Milestone.ID": 64,
	"escrow.MilestoneConfirmed.MilestoneID": 64, "escrow.Participant.CustomerID": 255, "escrow.Terms.CategoryID": 64,
	"escrow.Terms.DeliveryTimeline": 32, "escrow.UnitSold.CloneID": 64, "escrow.VaultCreated.ID": 64,
	"escrow.VaultCreated.MerchantID": 64, "escrow.VaultCreated.PaymentToken": 64, "escrow.VaultSettled.RefundedBy": 255,
	"escrow.VaultSettled.WinnerID": 255,
	"ledger.Account.ID":            255, "ledger.EscrowSummary.PaymentToken": 64, "ledger.Movement.MerchantID": 64,
	"ledger.Record.Currency": 8, "ledger.Record.CustomerID": 255, "ledger.Record.ID": 64, "ledger.Record.MerchantID": 64,
	"ledger.Record.Reference": 100, "ledger.WalletDetails.CustomerID": 255, "ledger.BlockchainDetails.Network": 16,
	"ledger.BlockchainDetails.ToAddress": 42, "ledger.WalletDetails.Phone": 32, "ledger.Beneficiary.Phone": 32,
	"merchant.Created.MerchantID": 64, "merchant.Created.Country": 64, "merchant.Key.Digest": 128, "merchant.Key.Hint": 16,
	"merchant.Key.ID": 64, "merchant.KeyRevoked.KeyID": 64, "merchant.SigningSecretRotated.Secret": 128,
	"escrow.PartiallyRefunded.RefundedBy": 64, "escrow.Reminded.MilestoneID": 64,
	"payment.ChargeStart.Reference": payment.MaxProviderReference, "payment.ChargeStart.AuthorizationURL": domain.MaxURL,
	"payment.Settled.Charge": payment.MaxProviderReference, "payment.BankAccount.AccountName": payment.MaxBankAccountField,
	"payment.BankAccount.AccountNumber": payment.MaxBankAccountField, "payment.BankAccount.BankName": payment.MaxBankAccountField,
	"payment.PayoutLeased.Holder": 64, "payment.PayoutStarted.LeaseHolder": 64,
	"payment.TestAccount.AccountName": 200, "payment.TestAccount.AccountNumber": 32, "payment.TestAccount.BankName": 200,
	"wallet.Posted.Reference": 100, "wallet.Posted.TransactionID": 64,
	"merchant.DashboardUserAdded.UserID": 64, "merchant.DashboardUserAdded.Role": 16,
	"merchant.DashboardUserRemoved.UserID":   64,
	"webhook.RedeliveryRequested.DeliveryID": 36, "webhook.RedeliveryRequested.Event": 64,
	"webhook.RedeliveryRequested.EscrowID": 64,
	"whitelist.AddressRemoved.AddressID":   64, "whitelist.AddressRemoved.WalletAddress": 42,
	"whitelist.AddressWhitelisted.AddressID": 64, "whitelist.AddressWhitelisted.CustomerID": 255,
	"whitelist.AddressWhitelisted.MerchantID": 64, "whitelist.AddressWhitelisted.Network": 16,
	"whitelist.AddressWhitelisted.WalletAddress": 42, "whitelist.AddressWhitelisted.Label": whitelist.MaxLabel,

	// URLs
	"category.Created.ImageURL": domain.MaxURL, "category.Updated.ImageURL": domain.MaxURL,
	"checkout.Opened.SuccessURL": domain.MaxURL, "checkout.Opened.CancelURL": domain.MaxURL,
	"escrow.DisputeEntry.ProofURL": domain.MaxURL, "merchant.WebhookURLSet.URL": domain.MaxURL,

	// text a client writes
	"category.Created.Name": category.MaxName, "category.Updated.Name": category.MaxName,
	"category.Created.Description": category.MaxDescription, "category.Updated.Description": category.MaxDescription,
	"customer.Blocked.Reason": 500, "customer.Created.BVN": 11, "customer.Created.DOB": 10,
	"customer.Created.Email": 254, "customer.ProfileUpdated.Email": 254,
	"customer.Created.Firstname": 100, "customer.Created.Lastname": 100, "customer.ProfileUpdated.Firstname": 100,
	"customer.ProfileUpdated.Lastname": 100, "customer.Created.Phone": 32,
	"escrow.DisputeEntry.Message": 5000, "escrow.DisputeEntry.Name": 201,
	"escrow.Milestone.Title": escrow.MaxMilestoneTitle, "escrow.Milestone.Description": escrow.MaxMilestoneDescription,
	"escrow.Terms.Purpose": 200, "escrow.Terms.Description": 2000,
	"ledger.Beneficiary.Name": 201, "ledger.EscrowSummary.Purpose": 200, "ledger.Record.Narration": 200,
	"ledger.WalletDetails.CustomerName": 201, "ledger.WalletDetails.Narration": 200,
	"ledger.WithdrawalDetails.AccountName": 200, "ledger.WithdrawalDetails.AccountNumber": 200,
	"ledger.WithdrawalDetails.BankCode": 200, "ledger.WithdrawalDetails.BankName": 200, "ledger.WithdrawalDetails.Narration": 200,
	"merchant.Created.Name": 200, "payment.PayoutReversed.Reason": payment.MaxProviderReason,
	"payment.PayoutFailed.Reason": payment.MaxProviderReason, "payment.PayoutAccepted.Transfer": payment.MaxProviderTransfer,

	// lists and maps (a list's elements are under its name and "[]"); an
	// entry "eventType/field" bounds the field within that event type only
	"category.OrderSet.IDs": category.MaxCategories, "category.OrderSet.IDs[]": 64,
	"escrow.Created.ImageURLs[]": domain.MaxURL, "escrow.Edited.AddImages[]": domain.MaxURL,
	"ledger.EscrowDetails.EscrowIDs[]": 64, "ledger.EscrowDetails.PaymentTokens[]": 64,
	"merchant.AllowlistSet.Entries[]":   100,
	"escrow.Created.ImageURLs":          escrow.MaxImagesAtCreation,
	"escrow.Edited.AddImages":           escrow.MaxImages,
	"escrow.Created.Milestones":         escrow.MaxMilestones,
	"escrow.MilestonesSet.Milestones":   escrow.MaxMilestones,
	"escrow.VaultCreated.Participants":  escrow.MaxVaultParticipants,
	"escrow.VaultCreated.Records":       escrow.MaxVaultParticipants,
	"escrow.VaultSettled.Records":       escrow.MaxVaultParticipants + 2,
	"escrow.Released.Records":           4,
	"escrow.DisputeResolved.Records":    4,
	"escrow.MilestoneConfirmed.Records": 4,
	"escrow.PartiallyRefunded.Records":  1,
	"payment.Settled.Records":           2, // a transfer's two sides; one otherwise
	// a record names the escrows of a payment: up to payment.MaxEscrows
	// for the payment of several escrows, one otherwise
	"ledger.EscrowDetails.EscrowIDs": 1, "ledger.EscrowDetails.PaymentTokens": 1, "ledger.EscrowDetails.Escrows": 1,
	"payment.intent_created/ledger.EscrowDetails.EscrowIDs":     payment.MaxEscrows,
	"payment.intent_created/ledger.EscrowDetails.PaymentTokens": payment.MaxEscrows,
	"payment.intent_created/ledger.EscrowDetails.Escrows":       payment.MaxEscrows,
	"payment.settled/ledger.EscrowDetails.EscrowIDs":            payment.MaxEscrows,
	"payment.settled/ledger.EscrowDetails.PaymentTokens":        payment.MaxEscrows,
	"payment.settled/ledger.EscrowDetails.Escrows":              payment.MaxEscrows,
	// a movement has a few postings, a vault's one or two per participant
	"ledger.Movement.Postings":                      6,
	"escrow.vault_created/ledger.Movement.Postings": escrow.MaxVaultParticipants + 2,
	"escrow.vault_settled/ledger.Movement.Postings": 2*escrow.MaxVaultParticipants + 4,
	"merchant.AllowlistSet.Entries":                 100,
	"merchant.Created.SigningSecrets":               2, "merchant.Created.SigningSecrets[]": 128,
	"merchant.CompatSet.SigningSecrets": 2, "merchant.CompatSet.SigningSecrets[]": 128,
}

// escrowRecords are the fields of the records an escrow's own events
// carry, built by one builder (escrow.State.record): a record id, a
// reference spelling the escrow's id and a key, one escrow id and token,
// and nothing else (no summary, narration, withdrawal, wallet or chain
// details). Only the vault's events, whose records grow with their
// participants, are bounded by it; the others fit with every field full.
func escrowRecords(eventType string) map[string]int {
	caps := map[string]int{"ledger.Record.Reference": 4 + 64 + 7 + 255, "ledger.Record.Narration": 0,
		"ledger.EscrowDetails.Escrows": 0, "ledger.EscrowSummary.PaymentToken": 0, "ledger.EscrowSummary.Purpose": 0,
		"ledger.EscrowSummary.Amount": absent, "ledger.EscrowSummary.Fee": absent, "ledger.EscrowSummary.Beneficiary": absent,
		"ledger.Record.WithdrawalDetails": absent, "ledger.Record.WalletDetails": absent, "ledger.Record.BlockchainDetails": absent}
	out := map[string]int{}
	for k, v := range caps {
		out[eventType+"/"+k] = v
	}
	return out
}

// absent is the cap of a pointer an event type never sets.
const absent = -1

func init() {
	for _, typ := range []string{"escrow.vault_created", "escrow.vault_settled"} {
		for k, v := range escrowRecords(typ) {
			fieldCaps[k] = v
		}
	}
}

// TestEveryEventFitsItsBound walks every event type of every aggregate
// with each field at its cap (text at its most characters, lists at their
// most elements, numbers at their largest) and checks that the stored
// event fits domain.MaxEventBytes: a request within every cap is never
// refused for the size of what it records.
func TestEveryEventFitsItsBound(t *testing.T) {
	engine := NewEngine(nil, 1)
	meta, err := marshalMeta(domain.Meta{RequestID: strings.Repeat("r", 128)})
	if err != nil {
		t.Fatal(err)
	}
	uncapped := map[string]bool{}
	for _, reg := range []domain.Registry{MerchantKind.Registry, CustomerKind.Registry, ReservationKind.Registry,
		WhitelistKind.Registry, WalletKind.Registry, PaymentKind.Registry, EscrowKind.Registry,
		CategoryKind.Registry, CategoryOrderKind.Registry, CheckoutKind.Registry, WebhookDeliveryKind.Registry} {
		for typ, ctor := range reg {
			ptr := reflect.ValueOf(ctor())
			fm := maximal{event: typ, uncapped: uncapped}
			fm.fill(ptr.Elem(), "")
			ev := ptr.Elem().Interface().(domain.Event)
			data, err := eventData(engine, ev, meta)
			switch {
			case err != nil:
				raw, _ := json.Marshal(ev)
				t.Errorf("%s at its caps is %d bytes, over the %d of one event: %v", typ, len(raw), domain.MaxEventBytes, err)
			default:
				t.Logf("%s: %d bytes at its caps", typ, len(data.Data))
			}
		}
	}
	if len(uncapped) > 0 {
		var names []string
		for n := range uncapped {
			names = append(names, n)
		}
		sort.Strings(names)
		t.Errorf("event fields without a cap in fieldCaps: %s", strings.Join(names, ", "))
	}
}

// maximal fills an event's fields with their largest values.
type maximal struct {
	event    string
	uncapped map[string]bool
}

// capFor is the cap of field key, the event type's own first, if any.
func (m maximal) capFor(key string) (int, bool) {
	if n, ok := fieldCaps[m.event+"/"+key]; ok {
		return n, true
	}
	n, ok := fieldCaps[key]
	return n, ok
}

// capOf is the cap of field key, the event type's own first.
func (m maximal) capOf(key string) int {
	if n, ok := fieldCaps[m.event+"/"+key]; ok {
		return n
	}
	n, ok := fieldCaps[key]
	if !ok {
		m.uncapped[key] = true
	}
	return n
}

// fill sets v, reached through field key, to its largest value.
func (m maximal) fill(v reflect.Value, key string) {
	switch v.Kind() {
	case reflect.Pointer:
		if n, ok := m.capFor(key); ok && n == absent {
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		m.fill(v.Elem(), key)
	case reflect.Struct:
		if v.Type().PkgPath() == "time" {
			return
		}
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			if f.IsExported() {
				m.fill(v.Field(i), v.Type().String()+"."+f.Name)
			}
		}
	case reflect.String:
		if v.Type() != reflect.TypeOf("") {
			v.SetString(strings.Repeat("e", 32)) // a named string type: one of a few fixed values
			return
		}
		v.SetString(strings.Repeat("a", m.capOf(key)))
	case reflect.Slice:
		n := m.capOf(key)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			m.fill(s.Index(i), key+"[]")
		}
		v.Set(s)
	case reflect.Map:
		n := m.capOf(key)
		mp := reflect.MakeMapWithSize(v.Type(), n)
		for i := range n {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			m.fill(e, key+"[]")
			if k.Kind() == reflect.String {
				k.SetString(strings.Repeat("k", i+1))
			}
			mp.SetMapIndex(k, e)
		}
		v.Set(mp)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(math.MinInt64 >> (64 - v.Type().Bits()))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(math.MaxUint64 >> (64 - v.Type().Bits()))
	case reflect.Bool:
		v.SetBool(true)
	}
}
