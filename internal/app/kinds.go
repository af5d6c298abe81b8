package app

import (
	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/category"
	"github.com/escrowd/escrowd/domain/checkout"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/domain/wallet"
	"github.com/escrowd/escrowd/domain/webhook"
	"github.com/escrowd/escrowd/domain/whitelist"
)

// The aggregate kinds. Stream name prefixes are stored: never rename one.
// Snapshot formats are stored too: a kind whose state or Apply changes
// gets a new one ("wallet/2"), so that no snapshot of the old is used.
// Only the kinds whose streams grow with a tenant's history have
// snapshots (TestSnapshotAtEveryRevisionEqualsReplay covers each); the
// others' streams stay short.
var (
	MerchantKind    = kind(Kind[merchant.State]{Name: "merchant", Registry: merchant.Registry, Apply: merchant.Apply, Snapshot: "merchant/2"})
	CustomerKind    = kind(Kind[customer.State]{Name: "customer", Registry: customer.Registry, Apply: customer.Apply, Snapshot: "customer/2"})
	ReservationKind = kind(Kind[customer.Reservation]{Name: "reservation", Registry: customer.ReservationRegistry, Apply: customer.ApplyReservation})
	WhitelistKind   = kind(Kind[whitelist.State]{Name: "whitelist", Registry: whitelist.Registry, Apply: whitelist.Apply})
	WalletKind      = kind(Kind[wallet.State]{Name: "wallet", Registry: wallet.Registry, Apply: wallet.Apply, Snapshot: "wallet/1"})
	PaymentKind     = kind(Kind[payment.State]{Name: "payment", Registry: payment.Registry, Apply: payment.Apply})
	// PayoutLinkKind is one stream per provider payout reference
	// (payment.PayoutLinkID).
	PayoutLinkKind = kind(Kind[payment.PayoutLink]{Name: "payoutlink", Registry: payment.PayoutLinkRegistry, Apply: payment.ApplyPayoutLink})
	// RecipientKind is one stream per bank account payouts are sent to
	// (payment.RecipientID).
	RecipientKind = kind(Kind[payment.Recipient]{Name: "recipient", Registry: payment.RecipientRegistry, Apply: payment.ApplyRecipient})
	// DepositAccountKind is one stream per customer: their dedicated
	// account at the provider and the deposits awaiting a transfer.
	DepositAccountKind = kind(Kind[payment.DepositAccount]{Name: "depositaccount", Registry: payment.DepositAccountRegistry, Apply: payment.ApplyDepositAccount})
	// AccountLinkKind is one stream per dedicated account
	// (payment.AccountLinkID).
	AccountLinkKind = kind(Kind[payment.AccountLink]{Name: "accountlink", Registry: payment.AccountLinkRegistry, Apply: payment.ApplyAccountLink})
	// ChargeKind is one stream per provider charge (payment.ChargeID).
	ChargeKind   = kind(Kind[payment.Charge]{Name: "charge", Registry: payment.ChargeRegistry, Apply: payment.ApplyCharge})
	EscrowKind   = kind(Kind[escrow.State]{Name: "escrow", Registry: escrow.Registry, Apply: escrow.Apply, Snapshot: "escrow/1"})
	CategoryKind = kind(Kind[category.State]{Name: "category", Registry: category.Registry, Apply: category.Apply})
	// CategoryOrderKind is one stream per merchant environment
	// (category.OrderKey).
	CategoryOrderKind = kind(Kind[category.Order]{Name: "categoryorder", Registry: category.OrderRegistry, Apply: category.ApplyOrder, Snapshot: "categoryorder/1"})
	CheckoutKind      = kind(Kind[checkout.State]{Name: "checkout", Registry: checkout.Registry, Apply: checkout.Apply})
	// WebhookDeliveryKind is one stream per webhook delivery redelivered
	// by hand: the redeliveries asked of it.
	WebhookDeliveryKind = kind(Kind[webhook.Delivery]{Name: webhook.StreamKind, Registry: webhook.Registry, Apply: webhook.Apply})
)

// registries is every kind's event registry, in declaration order.
var registries []domain.Registry

// kind registers k's event registry and returns k.
func kind[S any](k Kind[S]) Kind[S] {
	registries = append(registries, k.Registry)
	return k
}

// Registries is every kind's event registry: every event type a stream
// of this service can hold.
func Registries() []domain.Registry { return append([]domain.Registry(nil), registries...) }
