package app

import (
	"context"
	"encoding/hex"
	"errors"
	"sync"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore"
)

// An idempotency reservation (an Idempotency-Key a request holds) is tied to the
// request's writes through the event store, so a key can never run twice:
//
//   - every append the request makes also appends a ReservationWrite to the
//     reservation's own stream, the first one expecting the stream not to exist;
//   - a request that takes an abandoned reservation over first appends a
//     ReservationFenced to that stream, also expecting it not to exist.
//
// Exactly one of the two first appends succeeds. If the takeover wins, the
// abandoned request can no longer write (its append conflicts and fails with
// ErrReservationLost); if the abandoned request wrote, the takeover learns it and
// must not run the request again, although its response was never stored.
// (A request that wrote and is merely slow, not dead, may then finish its
// remaining commands: it is still the one execution.)

// reservationStreamPrefix names the reservation streams ("idempotency-<owner hex>").
// Stored: never rename it.
const reservationStreamPrefix = "idempotency"

// ReservationWrite records that an append was made under an idempotency key.
type ReservationWrite struct {
	KeyID string `json:"keyId"`
	Key   string `json:"idempotencyKey"`
}

func (ReservationWrite) EventType() string { return "idempotency.write" }

// ReservationFenced records that a reservation was taken over before it wrote anything:
// nothing may be written under it any more.
type ReservationFenced struct {
	KeyID string `json:"keyId"`
	Key   string `json:"idempotencyKey"`
}

func (ReservationFenced) EventType() string { return "idempotency.fenced" }

// ErrReservationLost refuses a write of a request whose idempotency reservation was
// taken over by a retry: the retry runs the request instead.
var ErrReservationLost = &domain.Error{Code: domain.Conflict, Message: "A request with this idempotency key is in progress"}

// Reservation is the idempotency reservation a request holds, carried in its context.
type Reservation struct {
	stream string
	write  ReservationWrite

	mu   sync.Mutex
	rev  int64 // the reservation stream's revision after our last write; -1 none
	lost bool
	// unknown: an append under the reservation failed without a refusal (the
	// connection broke during COMMIT, say), so it may have committed.
	unknown bool
}

// NewReservation returns the reservation of owner (the reservation's random identity) on
// idempotency key key of API key keyID.
func NewReservation(owner []byte, keyID, key string) *Reservation {
	return &Reservation{stream: reservationStream(owner), write: ReservationWrite{KeyID: keyID, Key: key}, rev: -1}
}

func reservationStream(owner []byte) string {
	return reservationStreamPrefix + "-" + hex.EncodeToString(owner)
}

// Wrote reports whether any append under the reservation committed.
func (c *Reservation) Wrote() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rev >= 0
}

// OutcomeUnknown reports whether an append under the reservation failed in a way
// that does not say whether it committed. Such a request must neither
// release its key (a retry could run it twice) nor store its answer: the
// reservation stays in flight until a retry takes it over, and the takeover's
// fence learns from the reservation's stream whether it wrote.
func (c *Reservation) OutcomeUnknown() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unknown
}

type reservationKey struct{}

// WithReservation returns ctx carrying reservation: every command run with it writes
// under the reservation.
func WithReservation(ctx context.Context, reservation *Reservation) context.Context {
	return context.WithValue(ctx, reservationKey{}, reservation)
}

func reservationFrom(ctx context.Context) *Reservation {
	c, _ := ctx.Value(reservationKey{}).(*Reservation)
	return c
}

// stamp adds the reservation's stream to an append. The caller holds c.mu until
// the append's outcome is recorded, so one request's commands write their
// markers in order.
func (c *Reservation) stamp(appends []eventstore.StreamAppend, e *Engine, metaJSON []byte) ([]eventstore.StreamAppend, error) {
	if c.lost {
		return nil, ErrReservationLost
	}
	expected := eventstore.NoStream
	if c.rev >= 0 {
		expected = eventstore.Exact(uint64(c.rev))
	}
	ev, err := eventData(e, c.write, metaJSON)
	if err != nil {
		return nil, err
	}
	return append(appends, eventstore.StreamAppend{Stream: c.stream, Expected: expected, Events: []eventstore.EventData{ev}}), nil
}

// recordOutcome records an append's outcome; it turns a conflict on the reservation's
// stream into ErrReservationLost.
func (c *Reservation) recordOutcome(res eventstore.AppendResult, err error) error {
	if err == nil {
		c.rev = int64(res.Revisions[c.stream])
		return nil
	}
	var ce *eventstore.ConcurrencyError
	switch {
	case errors.As(err, &ce) && ce.Stream == c.stream:
		c.lost = true
		return ErrReservationLost
	case errors.As(err, &ce):
		// Refused as a whole: nothing was written.
	default:
		c.unknown = true
	}
	return err
}

// FenceReservation takes the reservation of owner over for a retry of its request: it
// stops the reservation from ever writing, or reports that it already wrote (the
// request must then not run again).
func (e *Engine) FenceReservation(ctx context.Context, owner []byte, keyID, key string, meta domain.Meta) (wrote bool, err error) {
	if meta.OccurredAt.IsZero() {
		meta.OccurredAt = e.Now()
	}
	metaJSON, err := marshalMeta(meta)
	if err != nil {
		return false, err
	}
	ev, err := eventData(e, ReservationFenced{KeyID: keyID, Key: key}, metaJSON)
	if err != nil {
		return false, err
	}
	stream := reservationStream(owner)
	_, err = e.store.Append(ctx, eventstore.StreamAppend{Stream: stream, Expected: eventstore.NoStream, Events: []eventstore.EventData{ev}})
	var ce *eventstore.ConcurrencyError
	if err == nil || !errors.As(err, &ce) || ce.Stream != stream {
		return false, err
	}
	// The stream exists: the reservation wrote first, or a racing retry fenced
	// it first (the reservation row's compare-and-set then picks one retry).
	first, err := e.store.ReadStream(ctx, stream, 0, 1)
	if err != nil {
		return false, err
	}
	if len(first) == 0 {
		return false, errors.New("app: reservation stream conflicts but is empty")
	}
	return first[0].Type != ReservationFenced{}.EventType(), nil
}
