package sealing

import (
	"strings"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/keyring"
)

// Owner names whose data key seals an event's declared fields: the
// customer the event's stream or its customerId names, or the merchant
// (its stream, else its metadata's tenant). An object of the event with a
// customerId member (CustomerIn) seals what it holds with that customer's
// key instead.
type Owner int

const (
	OwnerMerchant Owner = iota
	OwnerCustomer
)

// Declaration lists an event type's string fields by dotted path (array
// elements are transparent; "*" is every member of a map): Sealed are
// secret or personal, Plain kept plain on purpose (identifiers, amounts'
// codes, states, times, the merchant's own texts). Every string field of
// every event type is in one of the two (TestEveryStringFieldIsDeclared).
type Declaration struct {
	Owner      Owner
	CustomerIn []string // paths of objects whose customerId names the subject ("" the event)
	Sealed     []string
	Plain      []string
}

// ledgerRecordSealed and ledgerRecordPlain are a ledger record's fields
// (the records of settlements, refunds, payouts), relative to the record:
// the people it names, their accounts and addresses are personal.
var ledgerRecordSealed = []string{
	"escrowDetails.beneficiary.name", "escrowDetails.beneficiary.phone",
	"escrowDetails.escrows.beneficiary.name", "escrowDetails.escrows.beneficiary.phone",
	"withdrawalDetails.accountName", "withdrawalDetails.accountNumber",
	"walletDetails.phone", "walletDetails.customerName",
	"blockchainDetails.toAddress",
}

var ledgerRecordPlain = []string{
	"id", "reference", "currency", "status", "transactionType", "creditType", "customerId", "merchantId", "environment", "narration",
	"escrowDetails.escrowIds", "escrowDetails.paymentTokens", "escrowDetails.paymentToken", "escrowDetails.purpose",
	"escrowDetails.escrows.paymentToken", "escrowDetails.escrows.purpose",
	"withdrawalDetails.bankCode", "withdrawalDetails.bankName", "withdrawalDetails.narration",
	"walletDetails.narration", "walletDetails.customerId", "blockchainDetails.network",
}

var movementPlain = []string{"movement.merchantId", "movement.environment",
	"movement.postings.from.holder", "movement.postings.from.id", "movement.postings.from.bucket",
	"movement.postings.to.holder", "movement.postings.to.id", "movement.postings.to.bucket"}

func under(prefix string, paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = prefix + "." + p
	}
	return out
}

func join(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// records declares an event carrying ledger records under field (records
// or record) and a movement, besides more plain fields.
func records(field string, movement bool, sealed []string, plain ...string) Declaration {
	p := join(under(field, ledgerRecordPlain), plain)
	if movement {
		p = join(p, movementPlain)
	}
	return Declaration{Owner: OwnerMerchant, CustomerIn: []string{field},
		Sealed: join(under(field, ledgerRecordSealed), sealed), Plain: p}
}

var disputeEntryPlain = []string{"entry.userId", "entry.proofUrl", "entry.type", "status"}

var escrowTermsPlain = []string{"terms.purpose", "terms.description", "terms.whoPays", "terms.deliveryTimeline", "terms.categoryId"}

// Declarations are the event types' fields, by stored type name.
var Declarations = map[string]Declaration{
	"customer.created": {Owner: OwnerCustomer,
		Sealed: []string{"firstname", "lastname", "email", "phone", "bvn", "dob"},
		Plain:  []string{"customerId", "merchantId", "environment", "countryId"}},
	"customer.profile_updated":     {Owner: OwnerCustomer, Sealed: []string{"firstname", "lastname", "email"}},
	"customer.blocked":             {Owner: OwnerCustomer, Sealed: []string{"reason"}},
	"customer.permissions_changed": {Owner: OwnerCustomer},
	"customer.unblocked":           {Owner: OwnerCustomer},
	"customer.erased":              {Owner: OwnerCustomer},
	"reservation.claimed":          {Plain: []string{"holder"}},
	"reservation.released":         {Plain: []string{"holder"}},

	"merchant.created":                {Sealed: []string{"signingSecrets.*"}, Plain: []string{"merchantId", "name", "country"}},
	"merchant.compat_set":             {Sealed: []string{"signingSecrets.*"}, Plain: []string{"profile"}},
	"merchant.signing_secret_rotated": {Sealed: []string{"secret"}, Plain: []string{"environment"}},
	"merchant.allowlist_set":          {Plain: []string{"entries"}},
	"merchant.escrow_defaults_set":    {},
	"merchant.fees_set":               {},
	// An API key is kept as its digest: the key itself is never stored.
	"merchant.key_issued":      {Plain: []string{"keyId", "environment", "role", "digest", "hint"}},
	"merchant.key_revoked":     {Plain: []string{"keyId"}},
	"merchant.webhook_url_set": {Plain: []string{"environment", "url"}},
	// A dashboard user is named by id only: the login's email stays in the
	// dashboard's own table.
	"merchant.dashboard_user_added":   {Plain: []string{"userId", "role"}},
	"merchant.dashboard_user_removed": {Plain: []string{"userId"}},
	"webhook.redelivery_requested":    {Plain: []string{"deliveryId", "event", "escrowId"}},

	"category.created":   {Plain: []string{"categoryId", "merchantId", "environment", "name", "description", "imageUrl"}},
	"category.updated":   {Plain: []string{"name", "description", "imageUrl"}},
	"category.deleted":   {},
	"category.order_set": {Plain: []string{"merchantId", "environment", "ids"}},

	"checkout.opened":    {Plain: []string{"id", "merchantId", "environment", "escrowId", "paymentToken", "customerId", "successUrl", "cancelUrl", "formToken"}},
	"checkout.paid":      {Plain: []string{"reference", "paymentId"}},
	"checkout.cancelled": {},

	"accountlink.linked": {Plain: []string{"merchantId", "customerId"}},
	"charge.started":     {Plain: []string{"merchantId", "customerId", "reference"}},
	"charge.applied":     records("records", true, nil, "merchantId", "customerId", "intent"),
	"depositaccount.opened": {Owner: OwnerCustomer, CustomerIn: []string{""},
		Sealed: []string{"providerCustomer", "account.accountNumber", "account.accountName"},
		Plain:  []string{"merchantId", "customerId", "environment", "account.bankName"}},
	"depositaccount.deposit_awaited": {Plain: []string{"reference"}},
	"depositaccount.deposit_matched": {Plain: []string{"reference", "charge"}},
	"depositaccount.deposit_lapsed":  {Plain: []string{"reference"}},

	"escrow.created": {Plain: join(escrowTermsPlain, []string{"id", "paymentToken", "merchantId", "environment", "sellerId", "imageUrl", "parentId", "channel", "settlementType",
		"milestones.id", "milestones.title", "milestones.description", "milestones.customerId", "milestones.status"})},
	"escrow.edited":             {Plain: join(escrowTermsPlain, []string{"addImages"})},
	"escrow.milestones_set":     {Plain: join(escrowTermsPlain, []string{"milestones.id", "milestones.title", "milestones.description", "milestones.customerId", "milestones.status"})},
	"escrow.deleted":            {},
	"escrow.additional_fee_set": {},
	"escrow.window_extended":    {},
	"escrow.funded":             {Plain: []string{"buyerId", "paymentId"}},
	"escrow.reminded":           {Plain: []string{"reminder", "milestoneId"}},
	"escrow.unit_sold":          {Plain: []string{"cloneId"}},
	// A dispute's entries name and quote a party.
	"escrow.dispute_submitted":   {Sealed: []string{"entry.name", "entry.message"}, Plain: disputeEntryPlain},
	"escrow.dispute_resolved":    records("records", true, []string{"entry.name", "entry.message"}, join(disputeEntryPlain, []string{"resolvedBy"})...),
	"escrow.milestone_confirmed": records("records", true, nil, "milestoneId", "status"),
	"escrow.partially_refunded":  records("records", true, nil, "refundedBy"),
	"escrow.released":            records("records", true, nil, "status"),
	"escrow.vault_created": records("records", true, nil, join(escrowTermsPlain, []string{"id", "paymentToken", "merchantId", "environment",
		"participants.customerId", "participants.status"})...),
	"escrow.vault_settled": records("records", true, nil, "status", "winnerId", "refundedBy"),

	"payment.intent_created": records("record", false,
		[]string{"testAccount.accountNumber", "testAccount.accountName", "depositAccount.accountNumber", "depositAccount.accountName"},
		"testAccount.bankName", "depositAccount.bankName", "charge.reference", "charge.authorizationUrl"),
	"payment.payout_accepted":  {Plain: []string{"transfer"}},
	"payment.payout_completed": records("record", false, nil),
	"payment.payout_failed":    records("record", true, nil, "reason"),
	"payment.payout_reversed":  records("record", true, nil, "reason"),
	"payment.payout_started":   records("record", true, nil, "leaseHolder"),
	"payment.payout_leased":    {Plain: []string{"holder"}},
	"payment.settled":          records("records", true, nil, "charge"),
	"payoutlink.linked":        {Plain: []string{"merchantId", "environment", "reference", "providerReference"}},
	// The provider's recipient of a bank account: the account and the
	// provider's code for it.
	"recipient.registered": {Sealed: []string{"accountNumber", "code"}, Plain: []string{"bankCode"}},

	"wallet.posted": {Plain: []string{"transactionId", "reference"}},

	"whitelist.address_whitelisted": {Owner: OwnerCustomer, CustomerIn: []string{""},
		Sealed: []string{"walletAddress", "label"},
		Plain:  []string{"customerId", "merchantId", "environment", "addressId", "network"}},
	"whitelist.address_removed": {Owner: OwnerCustomer, Sealed: []string{"walletAddress"}, Plain: []string{"addressId"}},
}

// rule is a compiled declaration.
type rule struct {
	decl Declaration
	root *node
	keys [][]byte
}

var rules = compile(Declarations)

func compile(ds map[string]Declaration) map[string]*rule {
	out := map[string]*rule{}
	for typ, d := range ds {
		if len(d.Sealed) == 0 {
			continue
		}
		r := &rule{decl: d, root: &node{}, keys: leafKeys(d.Sealed)}
		for _, p := range d.Sealed {
			r.root.add(p).leaf = true
		}
		for _, p := range d.CustomerIn {
			r.root.add(p).customerID = true
		}
		out[typ] = r
	}
	return out
}

// subject is the default subject of an event's sealed fields.
func (r *rule) subject(stream string, metadata []byte) keyring.Subject {
	kind, id, _ := strings.Cut(stream, "-")
	switch {
	case r.decl.Owner == OwnerCustomer && (kind == "customer" || kind == "whitelist"):
		return keyring.Customer(id)
	case r.decl.Owner == OwnerCustomer:
		return "" // named by the event's customerId
	case kind == "merchant":
		return keyring.Merchant(id)
	}
	if m, _, ok := eventstore.TenantOf(metadata); ok && m != "" {
		return keyring.Merchant(m)
	}
	return ""
}
