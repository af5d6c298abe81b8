-- HTTP edge state shared by every server instance: rate limits and
-- idempotency keys. Both are caches of request handling, not domain data:
-- deleting a row is always safe (it only forgets a limit or a replay).

-- One row per API key: the GCRA "theoretical arrival time". A key at full
-- quota has tat <= now, which is the same as having no row, so such rows are
-- deleted opportunistically. `allowed` is the outcome of the latest check,
-- kept so the single upsert can report its own decision through RETURNING.
CREATE TABLE http_rate_limits (
    key_id  text        PRIMARY KEY,
    tat     timestamptz NOT NULL,
    allowed boolean     NOT NULL
);
CREATE INDEX http_rate_limits_tat_idx ON http_rate_limits (tat);

-- Idempotency-Key records, scoped to the API key that sent them. A row with
-- completed_at NULL is in flight; `owner` is the claim token of the request
-- running it, so a request that lost its claim (taken over after being
-- abandoned) cannot overwrite or delete its successor's row. created_at is
-- when the current claim started: it dates both expiry (24 h) and
-- abandonment (2 min in flight).
CREATE TABLE http_idempotency_keys (
    key_id          text        NOT NULL,
    idempotency_key text        NOT NULL,
    fingerprint     bytea       NOT NULL,
    owner           bytea       NOT NULL,
    created_at      timestamptz NOT NULL,
    completed_at    timestamptz,
    status          integer,
    headers         jsonb,
    body            bytea,
    PRIMARY KEY (key_id, idempotency_key)
);
CREATE INDEX http_idempotency_keys_created_at_idx ON http_idempotency_keys (created_at);
