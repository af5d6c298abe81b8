-- A dashboard user's login email is kept sealed (internal/keyring: the
-- merchant's data key, bound to the field and the user) in email_sealed,
-- and found at login by its keyed hash (email_index, the blind index of
-- its trimmed, lower-cased form), which also keeps one login per address
-- across merchants. email held it in plain text before; a server seals
-- what it finds there and clears it (dashauth.Store.SealPlainSecrets at
-- start, and the operator's dashboard-user command), so the column is
-- empty once every server runs this version.
ALTER TABLE dashboard_users ADD COLUMN IF NOT EXISTS email_sealed bytea;
ALTER TABLE dashboard_users ADD COLUMN IF NOT EXISTS email_index text;
ALTER TABLE dashboard_users ALTER COLUMN email DROP NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS dashboard_users_email_index ON dashboard_users (email_index);
