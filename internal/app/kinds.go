package app

import (
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/merchant"
)

// The aggregate kinds. Stream name prefixes are stored: never rename one.
var (
	MerchantKind    = Kind[merchant.State]{Name: "merchant", Registry: merchant.Registry, Apply: merchant.Apply}
	CustomerKind    = Kind[customer.State]{Name: "customer", Registry: customer.Registry, Apply: customer.Apply}
	ReservationKind = Kind[customer.Reservation]{Name: "reservation", Registry: customer.ReservationRegistry, Apply: customer.ApplyReservation}
)
