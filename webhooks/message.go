// Package webhooks tells merchants what happened, through their callback
// URL: the mapping of domain events to messages (this file), the subscriber
// that writes them to a PostgreSQL outbox in the same transaction as its
// checkpoint, the dispatcher that signs and delivers them with retries, and
// the callback URL rules.
package webhooks

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/view"
)

// Message is one webhook as enqueued: the receiver gets Body, byte for byte,
// on every attempt.
type Message struct {
	ID          uuid.UUID
	MerchantID  string
	Environment domain.Environment
	Event       string
	// OrderKey groups messages delivered strictly one after the other (an
	// escrow's events); "" for messages without an order (payments).
	OrderKey string
	Body     []byte
	// envelope is what Body was made from (see sealBodies).
	envelope Envelope
}

// Envelope is the body of every webhook.
type Envelope struct {
	ID        string `json:"id"`
	Event     string `json:"event"`
	Data      any    `json:"data"`
	Timestamp string `json:"timestamp"`
}

// TimestampFormat is ISO 8601 in UTC with milliseconds.
const TimestampFormat = "2006-01-02T15:04:05.000Z"

// messageNamespace makes message ids deterministic (UUIDv5): replaying a
// batch derives the same ids, and the outbox's primary key drops the
// repeats.
var messageNamespace = uuid.MustParse("8a4f3c1e-5b7d-4e9a-9c2f-1d6b0e7a3f58")

// AnnouncedTypes are the transaction types that announce themselves when
// they settle. Internal legs (escrow_release, vault_*) do not.
var AnnouncedTypes = map[ledger.Type]bool{
	ledger.Deposit: true, ledger.Withdrawal: true, ledger.WalletTransfer: true,
	ledger.EscrowPayment: true, ledger.Commission: true, ledger.Delivery: true, ledger.Refund: true,
}

// Escrow event names.
const (
	EventEscrowCreated = "escrow.created"
	EventEscrowDeleted = "escrow.deleted"
	// EventEscrowPartiallyRefunded: part of an open escrow went back to
	// the buyer (its status does not change).
	EventEscrowPartiallyRefunded = "escrow.partially_refunded"
)

// EscrowStatusEvent is the event of an escrow reaching status s.
func EscrowStatusEvent(s escrow.Status) string { return "escrow." + strings.ToLower(string(s)) }

// PaymentEvent is the event of a settled transaction record.
func PaymentEvent(r ledger.Record) string {
	return paymentEventPrefix + string(r.Type) + "." + string(r.Status)
}

const paymentEventPrefix = "payment."

func newMessage(id uuid.UUID, merchantID string, env domain.Environment, event, orderKey string, data any, at time.Time) (Message, error) {
	envelope := Envelope{ID: id.String(), Event: event, Data: data, Timestamp: at.UTC().Format(TimestampFormat)}
	body, err := marshalBody(envelope)
	if err != nil {
		return Message{}, err
	}
	return Message{ID: id, MerchantID: merchantID, Environment: env, Event: event, OrderKey: orderKey, Body: body, envelope: envelope}, nil
}

// marshalBody is the JSON of a webhook body with &, < and > as
// themselves, as the public escrow API sends them: a receiver that
// compares a purpose ("Tom & Jerry <DVD>") with what it stored, or
// re-serialises the body to check the signature, sees the text as
// written. The body is never embedded in HTML by the service.
func marshalBody(env Envelope) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(env); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// EscrowMessages maps one escrow event (stored with id eventID at time at)
// given the escrow before and after it: escrow.created for a creation (a
// purchased clone is created too), escrow.<status> for every change of
// status, whatever event made it, and escrow.deleted. data is the escrow
// as the API shows it to the merchant; cat is its category, if known.
func EscrowMessages(eventID uuid.UUID, ev domain.Event, before, after escrow.State, cat *view.Category, at time.Time) ([]Message, error) {
	events := EscrowEvents(ev, before, after)
	if len(events) == 0 {
		return nil, nil
	}
	data := view.RenderEscrow(after, cat, "")
	out := make([]Message, 0, len(events))
	for _, name := range events {
		m, err := newMessage(uuid.NewSHA1(messageNamespace, []byte(eventID.String()+"|"+name)),
			after.MerchantID, after.Environment, name, after.ID, data, at)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// EscrowEvents names the webhook events an escrow event announces (none for
// most: edits, fee changes, units sold).
func EscrowEvents(ev domain.Event, before, after escrow.State) []string {
	switch e := ev.(type) {
	case escrow.Created:
		return []string{EventEscrowCreated}
	case escrow.VaultCreated: // created funded: it is ongoing at once
		return []string{EventEscrowCreated, EscrowStatusEvent(after.Status)}
	case escrow.Deleted:
		return []string{EventEscrowDeleted}
	case escrow.Reminded: // escrow.window_ending, escrow.milestone_due
		return []string{"escrow." + string(e.Reminder)}
	case escrow.PartiallyRefunded:
		return []string{EventEscrowPartiallyRefunded}
	}
	if before.ID != "" && after.Status != before.Status {
		return []string{EscrowStatusEvent(after.Status)}
	}
	return nil
}

// PaymentMessages maps the transaction records a money event writes:
// payment.<type>.<status> for each record of an announced type that is
// settled. The id depends only on the record, so a record announces itself
// once even if a later event writes it settled again.
func PaymentMessages(eff ledger.Effect, at time.Time) ([]Message, error) {
	var out []Message
	for _, r := range eff.Records {
		if !r.Status.Settled() || !AnnouncedTypes[r.Type] {
			continue
		}
		m, err := newMessage(PaymentMessageID(r), r.MerchantID, r.Environment, PaymentEvent(r), "", r, at)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// PaymentMessageID is the message id of a transaction record's
// announcement. A reversal has an id of its own: a payout the provider
// reverses after its success returns the money, and is announced again
// (payment.withdrawal.reversed after payment.withdrawal.success); the
// domain reverses a payout once, so it too is announced once.
func PaymentMessageID(r ledger.Record) uuid.UUID {
	key := "payment|" + r.MerchantID + "|" + r.ID
	if r.Status == ledger.Reversed {
		key += "|reversed"
	}
	return uuid.NewSHA1(messageNamespace, []byte(key))
}
