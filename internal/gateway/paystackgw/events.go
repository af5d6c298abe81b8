// Package paystackgw adapts Paystack to the gateway ports: it translates
// Paystack's words (statuses, events, errors) into the ports' and decides
// no money rule of its own.
package paystackgw

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/escrowd/escrowd/internal/gateway"
	"github.com/escrowd/escrowd/internal/paystack"
)

// Provider is the inbox's name for Paystack.
const Provider = "paystack"

// SignatureHeader carries an event's signature.
const SignatureHeader = "x-paystack-signature"

// Events reads Paystack's events for one environment, signed with that
// environment's secret key.
type Events struct{ SecretKey string }

var _ gateway.Events = Events{}

func (Events) Provider() string { return Provider }

// Authentic reports whether signature is the lowercase hex HMAC-SHA512 of
// body keyed with the secret key. An empty key authenticates nothing.
func (e Events) Authentic(body []byte, signature string) bool {
	if e.SecretKey == "" || signature == "" {
		return false
	}
	return paystack.VerifySignature(e.SecretKey, body, signature)
}

// event is the part of Paystack's event body read here.
type event struct {
	Event string `json:"event"`
	Data  struct {
		ID        json.Number `json:"id"`
		Reference string      `json:"reference"`
	} `json:"data"`
}

// Read reads an event's name and reference. Its identity is the event's
// name with the id of the transfer or transaction it is about (a transfer
// that succeeds, then is reversed, sends two events); a body without one
// is identified by its digest, so a delivery repeated byte for byte is
// still one event.
func (Events) Read(body []byte) (gateway.ProviderEvent, error) {
	var ev event
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&ev); err != nil {
		return gateway.ProviderEvent{}, err
	}
	if ev.Event == "" {
		return gateway.ProviderEvent{}, errors.New("paystack: event without a name")
	}
	out := gateway.ProviderEvent{Name: ev.Event, Reference: ev.Data.Reference, Kind: gateway.OtherEvent}
	switch ev.Event {
	case "transfer.success", "transfer.failed", "transfer.reversed":
		out.Kind = gateway.PayoutEvent
	case "charge.success":
		out.Kind = gateway.ChargeEvent
	}
	if out.Kind != gateway.OtherEvent && out.Reference == "" {
		return out, errors.New("paystack: " + ev.Event + " without a reference")
	}
	out.ID = EventID(ev.Event, ev.Data.ID.String(), body)
	return out, nil
}

// EventID is the inbox identity of an event: name and the id of what it
// is about, or the body's digest when it has no id.
func EventID(name, dataID string, body []byte) string {
	if _, err := strconv.ParseInt(dataID, 10, 64); err == nil {
		return name + ":" + dataID
	}
	sum := sha256.Sum256(body)
	return name + ":sha256:" + hex.EncodeToString(sum[:])
}
