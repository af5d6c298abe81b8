-- Projection checkpoints: the position of the last event each projector has
-- applied, moved in the same transaction as the projector's writes. The
-- runner locks a projector's row FOR UPDATE around every batch, which is also
-- what serialises it with a rebuild's table swap and with operator catch-ups.
-- Positions are stored as the bit pattern of their uint64 parts (a PostgreSQL
-- xid8 fits in bigint in practice); compare them in Go, never in SQL.
CREATE TABLE IF NOT EXISTS projection_checkpoints (
    name          text PRIMARY KEY,
    commit_pos    bigint NOT NULL DEFAULT 0,
    prepare_pos   bigint NOT NULL DEFAULT 0,
    last_error    text,
    last_error_at timestamptz,
    updated_at    timestamptz NOT NULL DEFAULT now()
);
