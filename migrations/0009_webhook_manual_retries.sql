-- A merchant may retry one delivery by hand a bounded number of times
-- (webhooks.MaxManualRetries): each retry queues a request to the
-- merchant's endpoint from the service, so an unbounded count would let a
-- key make the service send without end. The dispatcher's own attempts are
-- not counted here.
ALTER TABLE webhook_deliveries ADD COLUMN IF NOT EXISTS manual_retries integer NOT NULL DEFAULT 0;
