-- Idempotency records carry their own expiry (issue 23). A 4xx answer of a
-- request that wrote nothing (a validation failure, an insufficient
-- balance) is replayed for an hour, not 24: such a request moved nothing,
-- so running it again after the hour cannot move money twice, and hostile
-- or broken clients can no longer fill the table with a day of refusals.
-- Every other record keeps 24 hours from its claim, as before.
--
-- The default serves servers of the previous version during a rolling
-- upgrade, which insert without the column. The table is a cache of
-- request handling: rewriting it here is cheap.
ALTER TABLE http_idempotency_keys
    ADD COLUMN expires_at timestamptz NOT NULL DEFAULT now() + interval '24 hours';
UPDATE http_idempotency_keys SET expires_at = created_at + interval '24 hours';
CREATE INDEX http_idempotency_keys_expires_at_idx ON http_idempotency_keys (expires_at);
DROP INDEX http_idempotency_keys_created_at_idx;
