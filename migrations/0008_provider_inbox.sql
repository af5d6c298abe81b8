-- The inbox of payment providers' events (internal/inbox). A signed event
-- is kept here before the provider hears 200, and processed after by any
-- API process: a row is claimed by pushing due_at past a lease (under FOR
-- UPDATE SKIP LOCKED), so processes never wait for one another and a
-- process that dies mid-event leaves the row to be claimed again when its
-- lease ends. The key is the provider's identity of the event, so the same
-- event delivered again is kept once.
CREATE TABLE IF NOT EXISTS provider_inbox (
    provider     text        NOT NULL,
    environment  text        NOT NULL,
    event_id     text        NOT NULL,
    name         text        NOT NULL,
    body         bytea       NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now(),
    deliveries   integer     NOT NULL DEFAULT 1,
    -- pending: to be processed at due_at; done: processed (outcome says
    -- how: the money it moved, or why nothing was to move).
    state        text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'done')),
    due_at       timestamptz NOT NULL DEFAULT now(),
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text,
    outcome      text,
    processed_at timestamptz,
    PRIMARY KEY (provider, environment, event_id)
);
CREATE INDEX IF NOT EXISTS provider_inbox_due ON provider_inbox (due_at) WHERE state = 'pending';
