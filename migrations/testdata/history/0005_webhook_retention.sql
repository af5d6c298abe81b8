-- Outbox retention (webhooks/retention.go). finished_at is when a delivery
-- reached its terminal status (delivered, failed, no_endpoint), by the
-- dispatcher's clock; a manual retry clears it. The sweeper deletes terminal
-- rows by age through the partial index below; rows that are pending or in
-- flight are never in it, so a sweep cannot touch a delivery in progress.
ALTER TABLE webhook_deliveries ADD COLUMN finished_at timestamptz;

-- Rows already terminal: delivered ones finished when delivered; failed and
-- no_endpoint ones at their last claim, whose lease end next_attempt_at
-- still holds (a slight overestimate, so they are kept slightly longer).
UPDATE webhook_deliveries
   SET finished_at = CASE WHEN status = 'delivered' THEN coalesce(delivered_at, next_attempt_at)
                          ELSE next_attempt_at END
 WHERE status IN ('delivered', 'failed', 'no_endpoint');

CREATE INDEX webhook_deliveries_finished_idx ON webhook_deliveries (status, finished_at)
    WHERE status IN ('delivered', 'failed', 'no_endpoint');

-- One row: when a sweep last started, in any instance. Sweepers hold an
-- advisory lock while they sweep and start one only when this is older than
-- their interval, so the instances sweep at most once per interval together.
CREATE TABLE webhook_retention (
    singleton boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    swept_at  timestamptz NOT NULL
);
