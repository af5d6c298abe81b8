package customer

import (
	"github.com/escrowd/escrowd/domain"
)

// Reservation holds a unique value (an email or a phone of one merchant and
// environment) for one customer. Taking it in the same append that creates
// or updates the customer makes uniqueness atomic: two concurrent reservations
// cannot both pass the stream's expected revision.
type Reservation struct {
	Holder string // customer id; "" when free
}

type (
	ReservationTaken struct {
		Holder string `json:"holder"`
	}
	ReservationReleased struct {
		Holder string `json:"holder"`
	}
)

// The stored type keeps its old verb ("claimed"): stored names never change.
func (ReservationTaken) EventType() string    { return "reservation.claimed" }
func (ReservationReleased) EventType() string { return "reservation.released" }

// ReservationRegistry decodes reservation events.
var ReservationRegistry = domain.NewRegistry(
	func() domain.Event { return &ReservationTaken{} },
	func() domain.Event { return &ReservationReleased{} },
)

// ApplyReservation folds a reservation event.
func ApplyReservation(r Reservation, ev domain.Event) Reservation {
	switch e := ev.(type) {
	case ReservationTaken:
		return Reservation{Holder: e.Holder}
	case ReservationReleased:
		return Reservation{}
	}
	return r
}

// EmailKey and PhoneKey name the reservation of a value.
func EmailKey(merchantID string, env domain.Environment, email string) string {
	return merchantID + ":" + string(env) + ":email:" + email
}

func PhoneKey(merchantID string, env domain.Environment, phone string) string {
	return merchantID + ":" + string(env) + ":phone:" + phone
}
