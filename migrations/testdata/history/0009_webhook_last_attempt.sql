-- The last logged attempt of a delivery lives on its row; webhook_attempts
-- keeps only the attempts before it. Nearly every message is delivered at
-- its first attempt, and a row of webhook_attempts per outcome (its insert
-- and foreign key check, about 60 us of PostgreSQL per message, 13% of the
-- server's cost of a message) repeated what the delivery row already said.
-- Recording a retry's outcome moves the previous attempt from the row into
-- webhook_attempts in the same statement (webhooks/outbox.go,
-- recordOutcomes); the attempt log is webhook_attempts plus the row's
-- attempt, by attempt number.
--
-- The attempt keeps its own status code and error rather than reading
-- last_status_code and last_error: those also change when an outcome is
-- not an attempt (no_endpoint gives the attempt back and sets last_error),
-- and binaries older than this migration, during a rolling upgrade, set
-- them while logging their attempt in webhook_attempts; either would give
-- the row's attempt another attempt's result.
--
-- All NULL means the row holds no attempt: rows written before this
-- migration (their whole log is in webhook_attempts, and stays there) and
-- messages never attempted. Nullable columns without a default: adding
-- them rewrites nothing. Binaries older than this migration do not read
-- these columns, so their delivery log lacks the last attempt of messages
-- that newer binaries recorded.
ALTER TABLE webhook_deliveries
    ADD COLUMN last_attempt             integer,
    ADD COLUMN last_attempt_at          timestamptz,
    ADD COLUMN last_attempt_status_code integer,
    ADD COLUMN last_attempt_error       text,
    ADD COLUMN last_attempt_duration_ms integer;
