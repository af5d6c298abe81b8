-- The webhook outbox. The "webhooks" subscriber (webhooks/subscriber.go)
-- inserts messages here in the same transaction as its checkpoint, so an
-- event is enqueued exactly once; dispatchers deliver them. Not a read model:
-- it holds delivery state that a replay of the log cannot recreate, which is
-- why it lives in a migration and never in `projections rebuild`.
--
-- body is the exact bytes sent (and signed), fixed at enqueue, so every retry
-- sends an identical body. A row being delivered is 'delivering' with
-- next_attempt_at = lease_until: when the lease runs out without an outcome
-- (the dispatcher died) the row is due again, so the claim query needs one
-- condition and one index. attempts counts claims and is the fencing token
-- of an outcome: a dispatcher whose lease was taken over cannot overwrite its
-- successor's result.
CREATE TABLE webhook_deliveries (
    id               uuid        PRIMARY KEY,
    seq              bigint      GENERATED ALWAYS AS IDENTITY,
    merchant_id      text        NOT NULL,
    environment      text        NOT NULL,
    event            text        NOT NULL,
    -- Messages with the same order_key are delivered one after the other in
    -- seq order (an escrow's events); NULL means no ordering (payments).
    order_key        text,
    body             bytea       NOT NULL,
    status           text        NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'delivering', 'delivered', 'failed', 'no_endpoint')),
    attempts         integer     NOT NULL DEFAULT 0,
    last_status_code integer,
    last_error       text,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_until      timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz
);

-- The claim: due rows in (next_attempt_at, seq) order.
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at, seq)
    WHERE status IN ('pending', 'delivering');
-- The per-key ordering gate: is an earlier message of the key undelivered?
CREATE INDEX webhook_deliveries_order_idx ON webhook_deliveries (order_key, seq)
    WHERE status IN ('pending', 'delivering') AND order_key IS NOT NULL;
-- The merchant's delivery log, newest first.
CREATE INDEX webhook_deliveries_merchant_idx ON webhook_deliveries (merchant_id, environment, created_at DESC, seq DESC);

-- One row per delivery attempt that reached (or tried to reach) the receiver.
CREATE TABLE webhook_attempts (
    delivery_id uuid        NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempt     integer     NOT NULL,
    at          timestamptz NOT NULL,
    status_code integer,
    error       text,
    duration_ms integer     NOT NULL,
    PRIMARY KEY (delivery_id, attempt)
);
