package app

import (
	"github.com/escrowd/escrowd/domain/category"
	"github.com/escrowd/escrowd/domain/checkout"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/domain/wallet"
	"github.com/escrowd/escrowd/domain/whitelist"
)

// The aggregate kinds. Stream name prefixes are stored: never rename one.
var (
	MerchantKind    = Kind[merchant.State]{Name: "merchant", Registry: merchant.Registry, Apply: merchant.Apply}
	CustomerKind    = Kind[customer.State]{Name: "customer", Registry: customer.Registry, Apply: customer.Apply}
	ReservationKind = Kind[customer.Reservation]{Name: "reservation", Registry: customer.ReservationRegistry, Apply: customer.ApplyReservation}
	WhitelistKind   = Kind[whitelist.State]{Name: "whitelist", Registry: whitelist.Registry, Apply: whitelist.Apply}
	WalletKind      = Kind[wallet.State]{Name: "wallet", Registry: wallet.Registry, Apply: wallet.Apply}
	PaymentKind     = Kind[payment.State]{Name: "payment", Registry: payment.Registry, Apply: payment.Apply}
	EscrowKind      = Kind[escrow.State]{Name: "escrow", Registry: escrow.Registry, Apply: escrow.Apply}
	CategoryKind    = Kind[category.State]{Name: "category", Registry: category.Registry, Apply: category.Apply}
	// CategoryOrderKind is one stream per merchant environment
	// (category.OrderKey).
	CategoryOrderKind = Kind[category.Order]{Name: "categoryorder", Registry: category.OrderRegistry, Apply: category.ApplyOrder}
	CheckoutKind      = Kind[checkout.State]{Name: "checkout", Registry: checkout.Registry, Apply: checkout.Apply}
)
