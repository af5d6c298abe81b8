-- Listings (docs/listings.md). The read models' positions, kept counts and
-- their indexes belong to the projectors (each projector's Schema, so that
-- `escrowd projections rebuild` rebuilds them with the rows they count);
-- this migration serves the one listing that is not a read model: the
-- webhook delivery log, read newest first by seq and walked with a cursor
-- (startingAfter = a delivery id, then seq < its seq).
--
-- Cost: on an existing outbox, CREATE INDEX reads webhook_deliveries once
-- and holds its writes (the subscriber's enqueue, the dispatchers'
-- outcomes) until it ends; the table holds only the retention window.
CREATE INDEX webhook_deliveries_merchant_seq_idx ON webhook_deliveries (merchant_id, environment, seq);
CREATE INDEX webhook_deliveries_merchant_status_seq_idx ON webhook_deliveries (merchant_id, environment, status, seq);
