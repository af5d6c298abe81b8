-- The people of a merchant who use the dashboard. They are credentials,
-- not domain state: what they do is recorded as events whose actor is
-- their user_id; who they are and how they log in lives here.
CREATE TABLE IF NOT EXISTS dashboard_users (
    user_id          text PRIMARY KEY,
    merchant_id      text NOT NULL,
    email            text NOT NULL,
    role             text NOT NULL CHECK (role IN ('owner', 'support', 'viewer')),
    -- Argon2id in the PHC string format; NULL until the setup link is used.
    password_hash    text,
    -- The TOTP secret (base32) and whether a code proved the user holds it.
    totp_secret      text,
    totp_confirmed   boolean NOT NULL DEFAULT false,
    -- The last TOTP time step accepted: a code is good once.
    totp_last_step   bigint NOT NULL DEFAULT 0,
    -- SHA-256 (hex) of the one-time setup token; NULL once used.
    setup_digest     text UNIQUE,
    setup_expires_at timestamptz,
    failed_attempts  integer NOT NULL DEFAULT 0,
    locked_until     timestamptz,
    created_at       timestamptz NOT NULL,
    created_by       text NOT NULL
);
-- One login per address across merchants: the login form asks only for it.
CREATE UNIQUE INDEX IF NOT EXISTS dashboard_users_email ON dashboard_users (lower(email));
CREATE INDEX IF NOT EXISTS dashboard_users_merchant ON dashboard_users (merchant_id, created_at);
