-- The baseline schema of escrowd: every table, index and function the
-- current code uses, created in one step. Later changes go in new files
-- (0002_..., applied in name order); this file is never edited once a
-- database has applied it (migrations.Up refuses a checksum mismatch).

------------------------------------------------------------------------
-- The event store
------------------------------------------------------------------------

-- A stream's current revision (its last event's, 0-based). Appends move it
-- with a conditional UPDATE (or create it with an INSERT), which is the
-- optimistic concurrency check and the row lock that serialises writers of
-- one stream until commit.
CREATE TABLE es_streams (
    stream_id text PRIMARY KEY,
    revision  bigint NOT NULL
);

-- The log. Global order is (tx_id, seq): readers only see events of
-- transactions older than the oldest transaction still running
-- (pg_snapshot_xmin), so a transaction that commits late can never slip in
-- behind a position a reader has already passed.
--
-- data and metadata are json, not jsonb: nothing queries inside an event in
-- SQL except the tenant index below, every reader decodes it in Go, and json
-- keeps the writer's bytes as sent (what an auditor replaying the history
-- wants) while costing far less CPU per append than building jsonb. json
-- accepts a few things no text column can hold (the escape \u0000, unpaired
-- surrogate escapes); the adapter (eventstore/postgres) refuses those at
-- append, so an event that a projection could not store is never stored.
CREATE TABLE es_events (
    seq         bigint GENERATED ALWAYS AS IDENTITY,
    tx_id       xid8   NOT NULL DEFAULT pg_current_xact_id(),
    event_id    uuid   NOT NULL,
    stream_id   text   NOT NULL,
    revision    bigint NOT NULL,
    event_type  text   NOT NULL,
    data        json   NOT NULL,
    metadata    json,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT es_events_pkey PRIMARY KEY (tx_id, seq),
    CONSTRAINT es_events_stream_revision_key UNIQUE (stream_id, revision),
    CONSTRAINT es_events_event_id_key UNIQUE (event_id)
);

-- The audit trail (GET /v1/events) reads one merchant environment's events
-- in commit order after a position: this index serves "these events after
-- (tx_id, seq)" as one range scan, without reading other merchants' events.
-- The tenant is read from the metadata every event carries (domain.Meta);
-- the index is ordered like the log, so a page is its first rows. Each
-- append pays for the two expressions and one more index entry.
CREATE INDEX es_events_tenant_idx ON es_events
    ((metadata ->> 'merchantId'), (metadata ->> 'environment'), tx_id, seq);

-- es_append_batch: several independent appends in one call and one
-- transaction, each accepted or refused on its own (group commit).
--
-- Under load much of an append's cost is per call, not per event: the
-- round trip, the commit and its WAL flush, the events insert's executor
-- start-up. The store sends the appends that queue up while others are in
-- flight as one call of this function (eventstore/postgres/batch.go).
--
-- The caller guarantees that no stream is written or locked by two of the
-- batch's appends (streams only read, without a lock, may be shared), so
-- the appends are independent and their order does not matter. Entries
-- (p_streams and the arrays beside it) come in byte order of stream over
-- the whole batch, the order es_append locks in, so batches and single
-- appends cannot deadlock; p_cmd[e] is entry e's append, 1..n. Events name
-- their entry in p_stream_idx (1-based) and their offset within that
-- entry's events in p_rev_off.
--
-- Per entry, p_expected is -2 (any revision), -1 (no stream) or an exact
-- revision, and p_counts the number of events it appends. An entry with
-- events, or an exact check without events, writes or locks its stream's
-- row until commit. An entry with no events and p_observe true is an
-- observed check: the stream's committed revision is read without a lock
-- (a merchant's fees read "latest" by every escrow); so is a check without
-- events that expects no stream or any revision. A stream created by an
-- append ends at revision n - 1 after n events.
--
-- A failed check refuses its append instead of raising: the append's
-- entries already moved are moved back (a stream it created is deleted),
-- its later entries are skipped, its events are not stored, and the other
-- appends go on. Anything else (an event id stored already, a new stream
-- created concurrently) raises, the whole batch rolls back and the store
-- appends each one alone with es_append.
--
-- Returns one row: the transaction id; per append whether it was accepted,
-- and if not the stream that refused it and that stream's revision; per
-- entry the stream's revision after its append (NULL for a refused one);
-- and the id and sequence of every event stored.
CREATE FUNCTION es_append_batch(
    p_cmd int[],
    p_streams text[], p_expected bigint[], p_counts int[], p_observe boolean[],
    p_ids uuid[], p_types text[], p_data json[], p_meta json[],
    p_stream_idx int[], p_rev_off int[])
RETURNS TABLE (tx text, ok boolean[], revisions bigint[],
               bad_stream text[], bad_rev bigint[], event_ids uuid[], seqs bigint[])
LANGUAGE plpgsql AS $$
DECLARE
    nent int := coalesce(cardinality(p_streams), 0);
    ncmd int := 0;
    accepted boolean[];
    bad_s text[];
    bad_r bigint[];
    starts bigint[] := array_fill(NULL::bigint, ARRAY[nent]);
    afters bigint[] := array_fill(NULL::bigint, ARRAY[nent]);
    ins_ids uuid[];
    ins_seqs bigint[];
    i int;
    j int;
    k int;
    n int;
    cur bigint;
    refused boolean;
BEGIN
    IF nent = 0 OR cardinality(p_cmd) <> nent OR cardinality(p_expected) <> nent
       OR cardinality(p_counts) <> nent OR cardinality(p_observe) <> nent THEN
        RAISE EXCEPTION 'es_append_batch: malformed batch';
    END IF;
    SELECT max(c) INTO ncmd FROM unnest(p_cmd) c;
    accepted := array_fill(true, ARRAY[ncmd]);
    bad_s := array_fill(NULL::text, ARRAY[ncmd]);
    bad_r := array_fill(NULL::bigint, ARRAY[ncmd]);

    FOR i IN 1 .. nent LOOP
        k := p_cmd[i];
        CONTINUE WHEN NOT accepted[k];
        n := p_counts[i];
        refused := false;
        IF n = 0 AND p_observe[i] THEN
            SELECT revision INTO cur FROM es_streams WHERE stream_id = p_streams[i];
            cur := coalesce(cur, -1);
            refused := p_expected[i] <> -2 AND cur <> p_expected[i];
        ELSIF p_expected[i] = -1 THEN
            IF n = 0 THEN
                SELECT revision INTO cur FROM es_streams WHERE stream_id = p_streams[i];
                refused := FOUND;
                cur := coalesce(cur, -1);
            ELSE
                INSERT INTO es_streams (stream_id, revision) VALUES (p_streams[i], n - 1)
                ON CONFLICT (stream_id) DO NOTHING
                RETURNING revision INTO cur;
                IF NOT FOUND THEN
                    SELECT revision INTO cur FROM es_streams WHERE stream_id = p_streams[i];
                    cur := coalesce(cur, -1);
                    refused := true;
                END IF;
            END IF;
        ELSIF p_expected[i] = -2 THEN
            IF n = 0 THEN
                SELECT revision INTO cur FROM es_streams WHERE stream_id = p_streams[i];
                cur := coalesce(cur, -1);
            ELSE
                INSERT INTO es_streams AS s (stream_id, revision) VALUES (p_streams[i], n - 1)
                ON CONFLICT (stream_id) DO UPDATE SET revision = s.revision + n
                RETURNING s.revision INTO cur;
            END IF;
        ELSE
            UPDATE es_streams SET revision = revision + n
            WHERE stream_id = p_streams[i] AND revision = p_expected[i]
            RETURNING revision INTO cur;
            IF NOT FOUND THEN
                SELECT revision INTO cur FROM es_streams WHERE stream_id = p_streams[i];
                cur := coalesce(cur, -1);
                refused := true;
            END IF;
        END IF;

        IF refused THEN
            accepted[k] := false;
            bad_s[k] := p_streams[i];
            bad_r[k] := cur;
            -- Move back what this append's earlier entries moved. A stream
            -- at revision n - 1 after an entry of n events was created by
            -- it (an existing stream ends at n or more).
            FOR j IN 1 .. i - 1 LOOP
                CONTINUE WHEN p_cmd[j] <> k OR p_counts[j] = 0;
                IF afters[j] = p_counts[j] - 1 THEN
                    DELETE FROM es_streams WHERE stream_id = p_streams[j];
                ELSE
                    UPDATE es_streams SET revision = revision - p_counts[j] WHERE stream_id = p_streams[j];
                END IF;
            END LOOP;
        ELSE
            starts[i] := cur - n + 1;
            afters[i] := cur;
        END IF;
    END LOOP;

    -- A refused append reports no revisions.
    FOR i IN 1 .. nent LOOP
        IF NOT accepted[p_cmd[i]] THEN
            afters[i] := NULL;
            starts[i] := NULL;
        END IF;
    END LOOP;

    -- The accepted appends' events; the caller maps each sequence to its
    -- append by the event's id.
    WITH ins AS (
        INSERT INTO es_events (event_id, stream_id, revision, event_type, data, metadata)
        SELECT x.id, p_streams[x.sidx], starts[x.sidx] + x.off, x.typ, x.dat, x.meta
        FROM unnest(p_ids, p_stream_idx, p_rev_off, p_types, p_data, p_meta)
            AS x(id, sidx, off, typ, dat, meta)
        WHERE accepted[p_cmd[x.sidx]]
        RETURNING event_id, seq)
    SELECT array_agg(ins.event_id), array_agg(ins.seq) INTO ins_ids, ins_seqs FROM ins;

    tx := pg_current_xact_id()::text;
    ok := accepted;
    revisions := afters;
    bad_stream := bad_s;
    bad_rev := bad_r;
    event_ids := coalesce(ins_ids, '{}');
    seqs := coalesce(ins_seqs, '{}');
    RETURN NEXT;
END
$$;

-- es_append: one append (events to one or more streams, all or nothing),
-- decided by es_append_batch as a group of one, so the per-stream rules
-- live in one place and an append's outcome never depends on whether it
-- went alone or in a group.
--
-- Errors: SQLSTATE ES001 on a wrong expected revision (DETAIL = the
-- stream, HINT = its actual revision); ES002 on an event id already stored
-- elsewhere.
--
-- Idempotent retry: with p_check_ids, appending events that are all
-- already stored at the same places returns their existing position
-- instead of failing. That check costs an index probe per event and only a
-- retry can need it, so the adapter calls with p_check_ids false first; a
-- retry of a committed append then fails on its stream revision (ES001) or
-- on the event id's unique index, and only then does the adapter call again
-- with true, which takes the idempotent path or raises ES002.
-- p_observe (NULL: none) marks observed checks, as in es_append_batch.
CREATE FUNCTION es_append(
    p_streams text[], p_expected bigint[], p_counts int[],
    p_ids uuid[], p_types text[], p_data json[], p_meta json[],
    p_stream_idx int[], p_rev_off int[], p_check_ids boolean DEFAULT true,
    p_observe boolean[] DEFAULT NULL)
RETURNS TABLE (tx text, last_seq bigint, revisions bigint[])
LANGUAGE plpgsql AS $$
DECLARE
    n int := coalesce(array_length(p_streams, 1), 0);
    existing int;
    matching int;
    r record;
BEGIN
    IF p_check_ids AND array_length(p_ids, 1) > 0 THEN
        SELECT count(*) INTO existing FROM es_events WHERE event_id = ANY (p_ids);
        IF existing > 0 THEN
            SELECT count(*) INTO matching
            FROM es_events e
            JOIN unnest(p_ids, p_stream_idx) WITH ORDINALITY AS x(id, sidx, k) ON e.event_id = x.id
            WHERE e.stream_id = p_streams[x.sidx];
            IF existing = array_length(p_ids, 1) AND matching = existing THEN
                RETURN QUERY
                SELECT e.tx_id::text, e.seq,
                       ARRAY(SELECT coalesce((SELECT s.revision FROM es_streams s WHERE s.stream_id = st), -1) FROM unnest(p_streams) st)
                FROM es_events e WHERE e.event_id = ANY (p_ids)
                ORDER BY e.tx_id DESC, e.seq DESC LIMIT 1;
                RETURN;
            END IF;
            RAISE EXCEPTION 'event id already stored' USING ERRCODE = 'ES002';
        END IF;
    END IF;

    SELECT * INTO r FROM es_append_batch(
        array_fill(1, ARRAY[n]), p_streams, p_expected, p_counts,
        coalesce(p_observe, array_fill(false, ARRAY[n])),
        p_ids, p_types, p_data, p_meta, p_stream_idx, p_rev_off);
    IF NOT r.ok[1] THEN
        RAISE EXCEPTION 'wrong expected revision' USING ERRCODE = 'ES001', DETAIL = r.bad_stream[1], HINT = r.bad_rev[1]::text;
    END IF;
    tx := r.tx;
    last_seq := coalesce((SELECT max(s) FROM unnest(r.seqs) s), 0);
    revisions := r.revisions;
    RETURN NEXT;
END
$$;

------------------------------------------------------------------------
-- Read models
------------------------------------------------------------------------

-- Projection checkpoints: the position of the last event each projector has
-- applied, moved in the same transaction as the projector's writes. The
-- runner locks a projector's row around every batch, which is also what
-- serialises it with a rebuild's table swap and with operator catch-ups.
-- Positions are stored as the bit pattern of their uint64 parts (a PostgreSQL
-- xid8 fits in bigint in practice); compare them in Go, never in SQL. The
-- read-model tables (rm_*) are not here: each projector creates its own
-- (projections/), since they can always be rebuilt from the log.
CREATE TABLE projection_checkpoints (
    name          text PRIMARY KEY,
    commit_pos    bigint NOT NULL DEFAULT 0,
    prepare_pos   bigint NOT NULL DEFAULT 0,
    last_error    text,
    last_error_at timestamptz,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- projection_advance moves a projector's checkpoint from where the applier
-- expects it to the end of the batch it applies, and raises SQLSTATE EP001
-- if the checkpoint is not there (another applier or a rebuild moved it).
--
-- The runner sends a batch's writes in one round trip: this call first
-- (it locks the checkpoint row before any read-model row, the order every
-- applier and rebuild takes), then the projector's statements, all in the
-- one implicit transaction of a pipeline that ends in a single Sync. An
-- UPDATE that matches no row could not stop the statements after it; an
-- error does, and rolls the whole batch back.
CREATE FUNCTION projection_advance(
    p_name text, p_commit bigint, p_prepare bigint,
    p_expected_commit bigint, p_expected_prepare bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE projection_checkpoints
       SET commit_pos = p_commit, prepare_pos = p_prepare, updated_at = now(),
           last_error = NULL, last_error_at = NULL
     WHERE name = p_name AND commit_pos = p_expected_commit AND prepare_pos = p_expected_prepare;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'projection checkpoint % is not where the batch starts', p_name
            USING ERRCODE = 'EP001';
    END IF;
END
$$;

------------------------------------------------------------------------
-- HTTP edge state
------------------------------------------------------------------------

-- Rate limits and idempotency keys, shared by every server instance. Both
-- are caches of request handling, not domain data: deleting a row is always
-- safe (it only forgets a limit or a replay).

-- One row per API key: the GCRA "theoretical arrival time". A key at full
-- quota has tat <= now, which is the same as having no row, so such rows are
-- deleted opportunistically. `allowed` is the outcome of the latest check,
-- kept so the single upsert can report its own decision through RETURNING.
CREATE TABLE http_rate_limits (
    key_id  text        PRIMARY KEY,
    tat     timestamptz NOT NULL,
    allowed boolean     NOT NULL
);
CREATE INDEX http_rate_limits_tat_idx ON http_rate_limits (tat);

-- Idempotency-Key records, scoped to the API key that sent them. A row with
-- completed_at NULL is in flight; `owner` is the token of the request
-- running it, so a request that lost its row (taken over after being
-- abandoned) cannot overwrite or delete its successor's row. created_at is
-- when the current run started and dates abandonment (2 min in flight).
--
-- expires_at is set by the server for each record: 24 hours from its start,
-- or one hour for a 4xx answer of a request that wrote nothing (a
-- validation failure, an insufficient balance). Such a request moved
-- nothing, so running it again after the hour cannot move money twice, and
-- hostile or broken clients cannot fill the table with a day of refusals.
-- The sweeper deletes expired rows through its index.
CREATE TABLE http_idempotency_keys (
    key_id          text        NOT NULL,
    idempotency_key text        NOT NULL,
    fingerprint     bytea       NOT NULL,
    owner           bytea       NOT NULL,
    created_at      timestamptz NOT NULL,
    completed_at    timestamptz,
    status          integer,
    headers         jsonb,
    body            bytea,
    expires_at      timestamptz NOT NULL,
    PRIMARY KEY (key_id, idempotency_key)
);
CREATE INDEX http_idempotency_keys_expires_at_idx ON http_idempotency_keys (expires_at);

------------------------------------------------------------------------
-- Webhooks
------------------------------------------------------------------------

-- The webhook outbox. The "webhooks" subscriber (webhooks/subscriber.go)
-- inserts messages here in the same transaction as its checkpoint, so an
-- event is enqueued exactly once; dispatchers deliver them. Not a read model:
-- it holds delivery state that a replay of the log cannot recreate, which is
-- why it lives in a migration and never in `projections rebuild`.
--
-- body is the exact bytes sent (and signed), fixed at enqueue, so every retry
-- sends an identical body. A row being delivered is 'delivering' with
-- next_attempt_at = lease_until: when the lease runs out without an outcome
-- (the dispatcher died) the row is due again, so the query that leases due
-- rows needs one condition and one index. attempts counts leases and is the
-- fencing token of an outcome: a dispatcher whose lease was taken over
-- cannot overwrite its successor's result.
--
-- finished_at is when a delivery reached its terminal status (delivered,
-- failed, no_endpoint), by the dispatcher's clock; a manual retry clears
-- it. Retention (webhooks/retention.go) deletes terminal rows by age.
--
-- The last_attempt_* columns hold the delivery's latest logged attempt;
-- webhook_attempts holds the attempts before it. Nearly every message is
-- delivered at its first attempt, so one row per message says everything;
-- recording a retry's outcome moves the previous attempt into
-- webhook_attempts in the same statement. The attempt log is
-- webhook_attempts plus the row's attempt, by attempt number. The attempt
-- keeps its own status code and error rather than reading last_status_code
-- and last_error, which also change when an outcome is not an attempt
-- (no_endpoint gives the attempt back and sets last_error). All NULL: the
-- message was never attempted.
CREATE TABLE webhook_deliveries (
    id               uuid        PRIMARY KEY,
    seq              bigint      GENERATED ALWAYS AS IDENTITY,
    merchant_id      text        NOT NULL,
    environment      text        NOT NULL,
    event            text        NOT NULL,
    -- Messages with the same order_key are delivered one after the other in
    -- seq order (an escrow's events); NULL means no ordering (payments).
    order_key        text,
    body             bytea       NOT NULL,
    status           text        NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'delivering', 'delivered', 'failed', 'no_endpoint')),
    attempts         integer     NOT NULL DEFAULT 0,
    last_status_code integer,
    last_error       text,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_until      timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    finished_at      timestamptz,
    last_attempt             integer,
    last_attempt_at          timestamptz,
    last_attempt_status_code integer,
    last_attempt_error       text,
    last_attempt_duration_ms integer
);

-- Due rows in (next_attempt_at, seq) order, for the dispatchers' lease.
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at, seq)
    WHERE status IN ('pending', 'delivering');
-- The per-key ordering gate: is an earlier message of the key undelivered?
CREATE INDEX webhook_deliveries_order_idx ON webhook_deliveries (order_key, seq)
    WHERE status IN ('pending', 'delivering') AND order_key IS NOT NULL;
-- The merchant's delivery log, newest first.
CREATE INDEX webhook_deliveries_merchant_idx ON webhook_deliveries (merchant_id, environment, created_at DESC, seq DESC);
-- Retention's sweep by age. Rows pending or in flight are never in this
-- index, so a sweep cannot touch a delivery in progress.
CREATE INDEX webhook_deliveries_finished_idx ON webhook_deliveries (status, finished_at)
    WHERE status IN ('delivered', 'failed', 'no_endpoint');

-- One row per logged delivery attempt before the row's own (see above).
CREATE TABLE webhook_attempts (
    delivery_id uuid        NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempt     integer     NOT NULL,
    at          timestamptz NOT NULL,
    status_code integer,
    error       text,
    duration_ms integer     NOT NULL,
    PRIMARY KEY (delivery_id, attempt)
);

-- One row: when a retention sweep last started, in any instance. Sweepers
-- hold an advisory lock while they sweep and start one only when this is
-- older than their interval, so the instances sweep at most once per
-- interval together.
CREATE TABLE webhook_retention (
    singleton boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    swept_at  timestamptz NOT NULL
);
