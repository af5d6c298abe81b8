-- The data keys of envelope encryption (package internal/keyring): one
-- AES-256 key per subject (a customer, a merchant, the blind-index key),
-- stored only wrapped (AES-256-GCM) by the master key named by master_id,
-- which is kept outside the database (ESCROW_MASTER_KEY_FILE). Destroying
-- a subject's key clears wrapped for good: what was sealed with it can no
-- longer be opened, which is how personal data is erased from an
-- append-only log. The row stays, so the key is never made again.
CREATE TABLE IF NOT EXISTS data_keys (
    subject      text PRIMARY KEY,
    wrapped      bytea,
    master_id    text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    destroyed_at timestamptz,
    CHECK ((wrapped IS NULL) = (destroyed_at IS NOT NULL))
);
CREATE INDEX IF NOT EXISTS data_keys_master ON data_keys (master_id) WHERE wrapped IS NOT NULL;
