package webhooks

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// insertDelivery inserts a message of merchantID (test environment) as
// the subscriber would, pending, with orderKey ("" for none).
func (e *testEnv) insertDelivery(merchantID, orderKey string) uuid.UUID {
	e.t.Helper()
	id := uuid.New()
	var key *string
	if orderKey != "" {
		key = &orderKey
	}
	if _, err := e.pool.Exec(context.Background(), `
		INSERT INTO webhook_deliveries (id, merchant_id, environment, event, order_key, body)
		VALUES ($1, $2, 'test', 'payment.deposit.success', $3, '{}'::bytea)`, id, merchantID, key); err != nil {
		e.t.Fatal(err)
	}
	return id
}

// lease leases delivery id for its next attempt, as a claim does, and
// returns the attempt's number.
func (e *testEnv) lease(id uuid.UUID) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `
		UPDATE webhook_deliveries
		   SET status = 'delivering', attempts = attempts + 1,
		       lease_until = now() + interval '1 minute', next_attempt_at = now() + interval '1 minute'
		 WHERE id = $1 RETURNING attempts`, id).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *testEnv) record(outs ...outcome) bool {
	e.t.Helper()
	unblocked, err := recordOutcomes(context.Background(), e.pool, outs)
	if err != nil {
		e.t.Fatal(err)
	}
	return unblocked
}

// An ordered message that finishes without a request (no endpoint)
// unblocks its key's next message: other instances' dispatchers are told,
// as when a sent attempt finishes one.
func TestOrderedOutcomeWithoutRequestNotifies(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		t.Fatal(err)
	}
	id := e.insertDelivery("m-1", "escrow-1")
	msg := "No callback URL is set for this environment"
	if !e.record(outcome{ID: id, Attempt: e.lease(id), Status: StatusNoEndpoint, Err: &msg, At: time.Now()}) {
		t.Fatal("finishing an ordered message did not report it unblocked its key")
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := conn.WaitForNotification(wctx); err != nil {
		t.Fatalf("no notification: %v", err)
	}
}
