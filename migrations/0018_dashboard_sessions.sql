-- Dashboard sessions. Only a SHA-256 digest of the cookie's value is kept,
-- so a read of this table logs nobody in. A session is at stage
-- 'password' between a right password and a right TOTP code, 'active'
-- after; reaching 'active' replaces the session (a new id), so an id
-- known before login is worth nothing after it.
CREATE TABLE IF NOT EXISTS dashboard_sessions (
    digest       text PRIMARY KEY,
    user_id      text NOT NULL REFERENCES dashboard_users (user_id) ON DELETE CASCADE,
    stage        text NOT NULL CHECK (stage IN ('password', 'active')),
    -- The anti-forgery token every form of the session carries.
    form_token   text NOT NULL,
    created_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS dashboard_sessions_user ON dashboard_sessions (user_id);
CREATE INDEX IF NOT EXISTS dashboard_sessions_seen ON dashboard_sessions (last_seen_at);
