-- Aggregate snapshots (issue 26): the newest folded state of a stream at a
-- revision, so that a cold load reads it and the events after it instead
-- of the whole stream. The application writes and checks them
-- (internal/app/snapshot.go): data carries the state's format and a digest,
-- and a snapshot that does not check (another format, corrupted, a
-- revision the stream does not have) is ignored and the stream replayed.
-- A snapshot is never a source of truth: deleting rows only costs time.
CREATE TABLE es_snapshots (
    stream_id  text PRIMARY KEY,
    revision   bigint NOT NULL,
    data       bytea NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now()
);
