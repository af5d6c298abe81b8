-- A projector that fails on the same event again and again parks it: the
-- event and the error are recorded with its checkpoint, the checkpoint
-- stays before the event, and the projector applies nothing more until an
-- operator retries it (after a fix) or skips the event. Reads of its read
-- models answer 503 naming it meanwhile; nothing else waits for it.
ALTER TABLE projection_checkpoints
    ADD COLUMN parked_commit     bigint,
    ADD COLUMN parked_prepare    bigint,
    ADD COLUMN parked_event_id   uuid,
    ADD COLUMN parked_event_type text,
    ADD COLUMN parked_stream     text,
    ADD COLUMN parked_error      text,
    ADD COLUMN parked_at         timestamptz;
