// Attempt outcomes: stored in batches while the attempt's lease holds, or
// handed back unjudged.

package webhooks

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// outcome is the result of one attempt.
type outcome struct {
	ID      uuid.UUID
	Attempt int
	Status  string // delivered, pending (retry later), failed, no_endpoint
	Code    *int32
	Err     *string
	Delay   time.Duration // for pending: pause before the next attempt
	At      time.Time     // when the attempt started
	Took    time.Duration
	// Sent says a request was made, so the attempt is logged; a message
	// without an endpoint was not attempted and gets its attempt back.
	Sent bool
}

// recordOutcomes stores outcomes in one transaction. Each applies only while the
// row is still leased for that attempt (a dispatcher whose lease ran out and
// was taken over changes nothing). It commits asynchronously: losing an
// outcome in a database crash means the message is sent again, which
// at-least-once delivery allows. It reports whether a message with an order
// key finished, which may unblock the next message of that key.
//
// A sent outcome is logged, in the same statement: the delivery row holds
// its last logged attempt, webhook_attempts the ones before it
// (migrations/0001_baseline.sql). An outcome that applies puts
// its attempt on the row and moves the row's previous attempt, if it has
// one (a retry), into webhook_attempts; a first attempt writes nothing
// else. An outcome that does not apply still happened, so it is logged as
// every attempt is, into webhook_attempts (an earlier attempt than the row's
// lease), unless the row holds that very attempt (the outcome recorded
// twice) or is gone (swept: the foreign key would fail the whole batch);
// it moves and overwrites nothing. ON CONFLICT DO NOTHING makes recording
// an outcome again harmless.
//
// Both inserts read the row as it was before the update: every part of a
// statement sees one snapshot. The attempt columns change only with an
// outcome that takes the row out of 'delivering', so a row still leased
// for the attempt when the update locks it had them as the snapshot shows.
func recordOutcomes(ctx context.Context, pool *pgxpool.Pool, outs []outcome) (bool, error) {
	n := len(outs)
	ids, attempts, statuses := make([]uuid.UUID, n), make([]int32, n), make([]string, n)
	codes, errs := make([]*int32, n), make([]*string, n)
	delays, undo := make([]int64, n), make([]int32, n)
	ats, tooks := make([]time.Time, n), make([]int32, n)
	for i, o := range outs {
		ids[i], attempts[i], statuses[i] = o.ID, int32(o.Attempt), o.Status
		codes[i], errs[i], delays[i] = o.Code, o.Err, o.Delay.Milliseconds()
		ats[i], tooks[i] = o.At, int32(o.Took.Milliseconds())
		if !o.Sent {
			undo[i] = 1
		}
	}
	// One round trip: the commit setting and the statement go out as one
	// pipeline, which PostgreSQL runs as one implicit transaction. An
	// outcome not sent (undo) gives its attempt back and logs nothing: the
	// row keeps its attempt. When an ordered message finished, other
	// instances' dispatchers may hold its key's next message: the
	// statement notifies them.
	var unblocked bool
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('synchronous_commit', 'off', true)`)
	b.Queue(`
			WITH done AS (
			    UPDATE webhook_deliveries d
			       SET status = r.status, attempts = d.attempts - r.undo,
			           last_status_code = r.code, last_error = r.err, lease_until = NULL,
			           next_attempt_at = CASE WHEN r.status = 'pending'
			                                  THEN now() + r.delay * interval '1 millisecond'
			                                  ELSE d.next_attempt_at END,
			           delivered_at = CASE WHEN r.status = 'delivered' THEN r.at + r.took * interval '1 millisecond'
			                               ELSE d.delivered_at END,
			           finished_at = CASE WHEN r.status IN ('delivered', 'failed', 'no_endpoint')
			                              THEN r.at + r.took * interval '1 millisecond' END,
			           last_attempt = CASE WHEN r.undo = 0 THEN r.attempt ELSE d.last_attempt END,
			           last_attempt_at = CASE WHEN r.undo = 0 THEN r.at ELSE d.last_attempt_at END,
			           last_attempt_status_code = CASE WHEN r.undo = 0 THEN r.code ELSE d.last_attempt_status_code END,
			           last_attempt_error = CASE WHEN r.undo = 0 THEN r.err ELSE d.last_attempt_error END,
			           last_attempt_duration_ms = CASE WHEN r.undo = 0 THEN r.took ELSE d.last_attempt_duration_ms END
			      FROM unnest($1::uuid[], $2::int[], $3::text[], $4::int[], $5::text[], $6::bigint[], $7::int[], $8::timestamptz[], $9::int[])
			           AS r(id, attempt, status, code, err, delay, undo, at, took)
			     WHERE d.id = r.id AND d.status = 'delivering' AND d.attempts = r.attempt
			    RETURNING d.id, r.attempt, r.undo = 0 AS sent, d.order_key IS NOT NULL AS ordered
			), moved AS (
			    INSERT INTO webhook_attempts (delivery_id, attempt, at, status_code, error, duration_ms)
			    SELECT p.id, p.last_attempt, p.last_attempt_at, p.last_attempt_status_code, p.last_attempt_error, p.last_attempt_duration_ms
			      FROM done JOIN webhook_deliveries p ON p.id = done.id
			     WHERE done.sent AND p.last_attempt IS NOT NULL
			    ON CONFLICT DO NOTHING
			), stale AS (
			    INSERT INTO webhook_attempts (delivery_id, attempt, at, status_code, error, duration_ms)
			    SELECT r.id, r.attempt, r.at, r.code, r.err, r.took
			      FROM unnest($1::uuid[], $2::int[], $4::int[], $5::text[], $7::int[], $8::timestamptz[], $9::int[])
			           AS r(id, attempt, code, err, undo, at, took)
			      JOIN webhook_deliveries p ON p.id = r.id
			     WHERE r.undo = 0 AND (r.id, r.attempt) NOT IN (SELECT id, attempt FROM done)
			       AND p.last_attempt IS DISTINCT FROM r.attempt
			    ON CONFLICT DO NOTHING
			)
			SELECT u.unblocked, (SELECT count(*) FROM (SELECT pg_notify($10, '') WHERE u.unblocked) n)
			  FROM (SELECT coalesce(bool_or(ordered), false) AS unblocked FROM done) u`,
		pgUUIDs(ids), attempts, statuses, codes, errs, delays, undo, ats, tooks, notifyChannel,
	).QueryRow(func(row pgx.Row) error {
		var notified int64
		return row.Scan(&unblocked, &notified)
	})
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		return false, err
	}
	return unblocked, nil
}

// release returns attempts abandoned at shutdown to the queue at once
// (instead of waiting for their lease to end). The request may have reached
// the receiver, so the attempt still counts. It notifies the dispatchers
// when it returned any: the one releasing is stopping, and the others
// would otherwise find them only at their next poll.
func release(ctx context.Context, pool *pgxpool.Pool, cs []leasedAttempt) error {
	if len(cs) == 0 {
		return nil
	}
	ids, attempts := make([]uuid.UUID, len(cs)), make([]int32, len(cs))
	for i, c := range cs {
		ids[i], attempts[i] = c.ID, int32(c.Attempt)
	}
	_, err := pool.Exec(ctx, `
		WITH back AS (
		    UPDATE webhook_deliveries d
		       SET status = 'pending', next_attempt_at = now(), lease_until = NULL
		      FROM unnest($1::uuid[], $2::int[]) AS r(id, attempt)
		     WHERE d.id = r.id AND d.status = 'delivering' AND d.attempts = r.attempt
		    RETURNING d.id
		)
		SELECT pg_notify($3, '') WHERE EXISTS (SELECT 1 FROM back)`, pgUUIDs(ids), attempts, notifyChannel)
	return err
}

// pgUUIDs is ids as pgx encodes them directly. It encodes a uuid.UUID
// through its driver.Valuer: a string it then parses back, a cost paid for
// every message otherwise.
func pgUUIDs(ids []uuid.UUID) []pgtype.UUID {
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		out[i] = pgtype.UUID{Bytes: id, Valid: true}
	}
	return out
}

// flush stores outcomes as they come, batching whatever arrived while the
// previous batch was written (group commit).
func (d *Dispatcher) flush(results <-chan outcome) {
	for o := range results {
		batch := []outcome{o}
	drain:
		for len(batch) < 1000 {
			select {
			case o, ok := <-results:
				if !ok {
					break drain
				}
				batch = append(batch, o)
			default:
				break drain
			}
		}
		for try := 0; ; try++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			unblocked, err := recordOutcomes(ctx, d.Pool, batch)
			cancel()
			if err == nil {
				if unblocked {
					d.signal()
				}
				break
			}
			if try == 4 {
				// The leases will expire and the messages go out again:
				// at least once, never lost.
				d.Log.Error("webhooks: cannot record outcomes; they will be retried", zap.Int("count", len(batch)), zap.Error(err))
				break
			}
			time.Sleep(time.Duration(100<<try) * time.Millisecond)
		}
	}
}
