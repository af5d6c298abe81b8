package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
)

// The outbox is webhook_deliveries (migrations/0001_baseline.sql); this file
// holds every statement on it.

// notifyChannel wakes dispatchers: sent inside the enqueueing transaction,
// so it arrives exactly when the rows become visible.
const notifyChannel = "escrowd_webhooks"

// Delivery statuses.
const (
	StatusPending    = "pending"
	StatusDelivering = "delivering"
	StatusDelivered  = "delivered"
	StatusFailed     = "failed"
	StatusNoEndpoint = "no_endpoint"
)

// Statuses lists every delivery status (filters validate against it).
var Statuses = []string{StatusPending, StatusDelivering, StatusDelivered, StatusFailed, StatusNoEndpoint}

// Enqueue inserts msgs within tx; a message whose id is already stored is
// skipped. It notifies dispatchers when it inserted anything and returns how
// many rows it inserted.
func Enqueue(ctx context.Context, tx pgx.Tx, msgs []Message) (int64, error) {
	n, _, err := enqueue(ctx, tx, distinctMessages(msgs), nil, 0)
	return n, err
}

// bodyPlace is where a message's body is kept, which its sealed form is
// bound to; a body sealed there holds its customer's record fields sealed
// inside (sealPersonal).
func bodyPlace(id uuid.UUID) string { return earlierBodyPlace(id) + "\x00record fields sealed inside" }

// earlierBodyPlace is where an earlier version kept a body, sealing
// nothing inside it.
func earlierBodyPlace(id uuid.UUID) string { return "webhook_deliveries.body\x00" + id.String() }

// personalPlace is where a customer's personal field of a message's
// transaction record is kept, inside the body.
func personalPlace(id uuid.UUID, path string) string { return bodyPlace(id) + "\x00data." + path }

// sealBodies are the bodies of msgs sealed with their merchants' data keys
// (nil without a sealer: kept as they are). The personal fields of a
// customer's transaction record (a payment message's data) are sealed
// first with that customer's key, as the record's row keeps them, so
// forgetting the customer erases them from the deliveries kept too: a
// delivery sent after that carries them erased, and the money fields as
// they were.
func sealBodies(ctx context.Context, sealer domain.Sealer, msgs []Message) ([][]byte, error) {
	if sealer == nil {
		return nil, nil
	}
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		body, err := sealPersonal(ctx, sealer, m)
		if err != nil {
			return nil, fmt.Errorf("webhooks: sealing message %s: %w", m.ID, err)
		}
		sealed, err := sealer.Seal(ctx, domain.MerchantData(m.MerchantID), bodyPlace(m.ID), string(body))
		if err != nil {
			return nil, fmt.Errorf("webhooks: sealing message %s: %w", m.ID, err)
		}
		if sealed == domain.Erased {
			return nil, fmt.Errorf("webhooks: message %s: the data key of merchant %s was destroyed", m.ID, m.MerchantID)
		}
		out[i] = []byte(sealed)
	}
	return out, nil
}

// sealPersonal is m's body with the personal fields of its customer's
// transaction record sealed with the customer's key (erased when it was
// destroyed); m's body as it is for other messages.
func sealPersonal(ctx context.Context, sealer domain.Sealer, m Message) ([]byte, error) {
	r, ok := m.envelope.Data.(ledger.Record)
	if !ok || r.CustomerID == "" {
		return m.Body, nil
	}
	paths, fields := r.PersonalFields()
	for i, f := range fields {
		sealed, err := sealer.Seal(ctx, r.DataOwner(), personalPlace(m.ID, paths[i]), *f)
		if err != nil {
			return nil, err
		}
		*f = sealed
	}
	env := m.envelope
	env.Data = r
	return marshalBody(env)
}

// OpenBody is a kept body as it is sent: a message's JSON as it is, a
// sealed one opened (an error without a sealer, so that no sealed text is
// ever sent), with its record's personal fields opened (domain.Erased once
// their customer was forgotten).
func OpenBody(ctx context.Context, sealer domain.Sealer, id uuid.UUID, body []byte) ([]byte, error) {
	if len(body) == 0 || body[0] == '{' {
		return body, nil
	}
	if sealer == nil {
		return nil, errors.New("the message is sealed and this dispatcher has no keys to open it")
	}
	plain, err := sealer.Open(ctx, bodyPlace(id), string(body))
	inside := err == nil
	if !inside {
		earlier, err2 := sealer.Open(ctx, earlierBodyPlace(id), string(body))
		if err2 != nil {
			return nil, err
		}
		plain = earlier
	}
	if plain == domain.Erased {
		return nil, errors.New("the merchant's data key was destroyed")
	}
	if !inside {
		return []byte(plain), nil
	}
	return openPersonal(ctx, sealer, id, []byte(plain))
}

var quotedSealed = []byte(`"` + domain.SealedPrefix)

// openPersonal is body with the record fields sealPersonal sealed opened:
// encoding/json writes a record one way, so the bytes are those of the
// body before sealing. sealPersonal sealed every such field whatever it
// held, so one that does not open is an error (the attempt fails and is
// tried again), never text to send.
func openPersonal(ctx context.Context, sealer domain.Sealer, id uuid.UUID, body []byte) ([]byte, error) {
	if !bytes.Contains(body, quotedSealed) {
		return body, nil
	}
	var env struct {
		ID        string          `json:"id"`
		Event     string          `json:"event"`
		Data      json.RawMessage `json:"data"`
		Timestamp string          `json:"timestamp"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("the message does not read: %w", err)
	}
	if !strings.HasPrefix(env.Event, paymentEventPrefix) {
		return body, nil
	}
	var r ledger.Record
	if err := json.Unmarshal(env.Data, &r); err != nil {
		return nil, fmt.Errorf("the message's record does not read: %w", err)
	}
	if r.CustomerID == "" {
		return body, nil
	}
	paths, fields := r.PersonalFields()
	for i, f := range fields {
		if !domain.IsSealed(*f) {
			continue // empty, or erased when the message was made
		}
		plain, err := sealer.Open(ctx, personalPlace(id, paths[i]), *f)
		if err != nil {
			return nil, fmt.Errorf("the record's %s does not open: %w", paths[i], err)
		}
		*f = plain
	}
	return marshalBody(Envelope{ID: env.ID, Event: env.Event, Data: r, Timestamp: env.Timestamp})
}

// distinctMessages is msgs without repeats of an id (the first is kept).
func distinctMessages(msgs []Message) []Message {
	out := make([]Message, 0, len(msgs))
	seen := make(map[uuid.UUID]bool, len(msgs))
	for _, m := range msgs {
		if !seen[m.ID] {
			seen[m.ID] = true
			out = append(out, m)
		}
	}
	return out
}

// enqueue inserts msgs (of distinct ids) within tx, skipping any already
// stored. take[i] (take may be nil) asks for msgs[i] to be stored leased
// for its first attempt, for lease, as a lease would lease it: it is
// unless an earlier message of its order key is undelivered (stored, or
// earlier in msgs). It returns how many rows it inserted and the attempts
// it leased, and notifies dispatchers when a message is pending (see
// queueEnqueue).
func enqueue(ctx context.Context, tx pgx.Tx, msgs []Message, take []bool, lease time.Duration) (int64, []leasedAttempt, error) {
	b := &pgx.Batch{}
	res := queueEnqueue(b, msgs, nil, take, lease)
	if b.Len() == 0 {
		return 0, nil, nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, nil, err
	}
	return res.inserted, res.leased, nil
}

// enqueued is what queueEnqueue's statements found, filled in as the
// batch's results are read.
type enqueued struct {
	inserted int64
	leased   []leasedAttempt
}

// queueEnqueue queues enqueue's statement on b, to run in the same
// transaction (the subscriber's batch goes out in one pipeline with its
// checkpoint move, see projections.Planner). What it did is in the
// result once b's results are read. Besides the insert, from the rows it
// inserted (its RETURNING, not a second look at the table: a message
// stored before, by a repeated batch, neither wakes anyone nor changes
// the commit):
//   - a notification to dispatchers if it inserted a message pending;
//   - synchronous_commit on if it inserted a message leased: an attempt's
//     number must survive a database crash before the attempt is made, or
//     the next lease would reuse it (as a lease's commit).
//
// stored (nil: the messages' own) are the bodies kept in the rows; the
// attempts leased carry the messages' own.
func queueEnqueue(b *pgx.Batch, msgs []Message, stored [][]byte, take []bool, lease time.Duration) *enqueued {
	res := &enqueued{}
	if len(msgs) == 0 {
		return res
	}
	n := len(msgs)
	ids, merchants, envs, events, bodies := make([]pgtype.UUID, n), make([]string, n), make([]string, n),
		make([]string, n), make([][]byte, n)
	keys, takes := make([]*string, n), make([]bool, n)
	for i, m := range msgs {
		ids[i] = pgtype.UUID{Bytes: m.ID, Valid: true}
		merchants[i], envs[i], events[i], bodies[i] = m.MerchantID, string(m.Environment), m.Event, m.Body
		if stored != nil {
			bodies[i] = stored[i]
		}
		if m.OrderKey != "" {
			k := m.OrderKey
			keys[i] = &k
		}
		takes[i] = take != nil && take[i]
	}
	// The order gate is the lease's: a message waits while an earlier one
	// of its key is pending or delivering. Within the batch only the
	// first message of a key may be leased (its next ones are behind it).
	b.Queue(`
		WITH m AS (
		    SELECT u.*, row_number() OVER (PARTITION BY u.order_key ORDER BY u.ord) AS nth
		      FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::bool[])
		           WITH ORDINALITY AS u(id, merchant_id, environment, event, order_key, body, take, ord)
		), g AS (
		    SELECT m.*, m.take AND (m.order_key IS NULL OR m.nth = 1 AND NOT EXISTS (
		               SELECT 1 FROM webhook_deliveries e
		                WHERE e.order_key = m.order_key AND e.status IN ('pending', 'delivering'))) AS leased
		      FROM m
		), ins AS (
		    INSERT INTO webhook_deliveries (id, merchant_id, environment, event, order_key, body,
		                                    status, attempts, lease_until, next_attempt_at)
		    SELECT id, merchant_id, environment, event, order_key, body,
		           CASE WHEN leased THEN 'delivering' ELSE 'pending' END,
		           CASE WHEN leased THEN 1 ELSE 0 END,
		           CASE WHEN leased THEN statement_timestamp() + $8::bigint * interval '1 millisecond' END,
		           CASE WHEN leased THEN statement_timestamp() + $8::bigint * interval '1 millisecond' ELSE now() END
		      FROM g
		     ORDER BY ord
		ON CONFLICT (id) DO NOTHING
		    RETURNING id, status = 'delivering' AS leased
		), f AS (
		    SELECT coalesce(bool_or(NOT leased), false) AS queued, coalesce(bool_or(leased), false) AS took FROM ins
		)
		SELECT id, leased, 0::bigint, 0::bigint FROM ins
		UNION ALL
		SELECT NULL::uuid, NULL::bool,
		       (SELECT count(*) FROM (SELECT pg_notify($9, '') WHERE f.queued) n),
		       (SELECT count(*) FROM (SELECT set_config('synchronous_commit', 'on', true) WHERE f.took) s)
		  FROM f`, ids, merchants, envs, events, keys, bodies, takes, lease.Milliseconds(), notifyChannel,
	).Query(func(rows pgx.Rows) error {
		byID := make(map[uuid.UUID]int, n)
		for i, m := range msgs {
			byID[m.ID] = i
		}
		for rows.Next() {
			var (
				id       pgtype.UUID
				ok       *bool
				one, two int64
			)
			if err := rows.Scan(&id, &ok, &one, &two); err != nil {
				return err
			}
			if !id.Valid { // f's row: the notification and the commit setting
				continue
			}
			res.inserted++
			if !*ok {
				continue
			}
			m := msgs[byID[id.Bytes]]
			res.leased = append(res.leased, leasedAttempt{ID: m.ID, MerchantID: m.MerchantID, Environment: m.Environment,
				Event: m.Event, Body: m.Body, Attempt: 1})
		}
		return rows.Err()
	})
	return res
}
