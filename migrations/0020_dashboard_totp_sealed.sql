-- A dashboard user's TOTP secret is kept sealed (internal/keyring: the
-- merchant's data key, bound to the field and the user), never in plain
-- text. totp_secret held it in plain text before; a server seals what it
-- finds there into totp_sealed and clears it (dashauth.Store.SealPlainSecrets
-- at start, and at a user's next login), so the column is empty once every
-- server runs this version.
ALTER TABLE dashboard_users ADD COLUMN IF NOT EXISTS totp_sealed bytea;
