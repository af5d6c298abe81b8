-- When each API key was last used. The serving processes write it at most
-- once a minute per key each, outside the event log: a use is not a fact
-- the ledger depends on, and recording every one would add a write to
-- every request. `escrowd key list` reads it beside the keys.
CREATE TABLE IF NOT EXISTS api_key_uses (
    key_id       text PRIMARY KEY,
    last_used_at timestamptz NOT NULL
);
