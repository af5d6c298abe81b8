-- Uploaded files (escrow images, dispute evidence, category images) in the
-- database, so every instance serves every file with nothing else to run
-- (internal/files, the PostgreSQL file store). A name is "owner/file":
-- the owner is a digest of the merchant environment, whose storage quota
-- sums size over its rows (an index-only scan of the owner index); sha256
-- is what a move from the old data directory verifies against.
CREATE TABLE IF NOT EXISTS stored_files (
    name       text PRIMARY KEY,
    owner      text NOT NULL,
    size       bigint NOT NULL,
    sha256     bytea NOT NULL,
    data       bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
-- Images and PDFs do not compress: keep them out of line, uncompressed.
ALTER TABLE stored_files ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE INDEX IF NOT EXISTS stored_files_owner ON stored_files (owner) INCLUDE (size);
