-- A data key about to be destroyed (internal/keyring, PrepareDestroy): it
-- is still stored, so what was sealed with it opens until the destruction,
-- but no process keeps it cached any longer. Every opening reads the row
-- again, so once wrapped is cleared nothing opens anywhere, without waiting
-- for a cached key to expire in a process that cannot know of the erasure
-- yet (one that started after it was recorded, before the key went).
ALTER TABLE data_keys ADD COLUMN IF NOT EXISTS destroying_since timestamptz;
