-- The event store. Global order is (tx_id, seq): readers only see events of
-- transactions older than the oldest transaction still running
-- (pg_snapshot_xmin), so a transaction that commits late can never slip in
-- behind a position a reader has already passed.
CREATE TABLE es_streams (
    stream_id text PRIMARY KEY,
    revision  bigint NOT NULL
);

CREATE TABLE es_events (
    seq         bigint GENERATED ALWAYS AS IDENTITY,
    tx_id       xid8   NOT NULL DEFAULT pg_current_xact_id(),
    event_id    uuid   NOT NULL,
    stream_id   text   NOT NULL,
    revision    bigint NOT NULL,
    event_type  text   NOT NULL,
    data        jsonb  NOT NULL,
    metadata    jsonb,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT es_events_pkey PRIMARY KEY (tx_id, seq),
    CONSTRAINT es_events_stream_revision_key UNIQUE (stream_id, revision),
    CONSTRAINT es_events_event_id_key UNIQUE (event_id)
);

-- es_append writes events to several streams in one transaction.
-- p_expected per stream: -2 any, -1 no stream, n exact revision.
-- p_stream_idx/p_rev_off per event: its stream (1-based) and offset within
-- that stream's events. Raises SQLSTATE ES001 on a wrong expected revision
-- (DETAIL = stream, HINT = actual revision) and ES002 on an event id that is
-- already stored elsewhere. Appending events that are all already stored at
-- the same places returns their existing position (idempotent retry).
CREATE FUNCTION es_append(
    p_streams text[], p_expected bigint[], p_counts int[],
    p_ids uuid[], p_types text[], p_data jsonb[], p_meta jsonb[],
    p_stream_idx int[], p_rev_off int[])
RETURNS TABLE (tx text, last_seq bigint, revisions bigint[])
LANGUAGE plpgsql AS $$
DECLARE
    i int;
    n int;
    cur bigint;
    starts bigint[] := '{}';
    existing int;
    matching int;
BEGIN
    IF array_length(p_ids, 1) > 0 THEN
        SELECT count(*) INTO existing FROM es_events WHERE event_id = ANY (p_ids);
        IF existing > 0 THEN
            SELECT count(*) INTO matching
            FROM es_events e
            JOIN unnest(p_ids, p_stream_idx) WITH ORDINALITY AS x(id, sidx, k) ON e.event_id = x.id
            WHERE e.stream_id = p_streams[x.sidx];
            IF existing = array_length(p_ids, 1) AND matching = existing THEN
                RETURN QUERY
                SELECT max(e.tx_id)::text, max(e.seq),
                       ARRAY(SELECT coalesce((SELECT s.revision FROM es_streams s WHERE s.stream_id = st), -1) FROM unnest(p_streams) st)
                FROM es_events e WHERE e.event_id = ANY (p_ids);
                RETURN;
            END IF;
            RAISE EXCEPTION 'event id already stored' USING ERRCODE = 'ES002';
        END IF;
    END IF;

    FOR i IN 1 .. coalesce(array_length(p_streams, 1), 0) LOOP
        n := p_counts[i];
        IF p_expected[i] = -1 THEN
            IF n = 0 THEN
                SELECT revision INTO cur FROM es_streams WHERE stream_id = p_streams[i];
                IF FOUND THEN
                    RAISE EXCEPTION 'wrong expected revision' USING ERRCODE = 'ES001', DETAIL = p_streams[i], HINT = cur::text;
                END IF;
                cur := -1;
            ELSE
                INSERT INTO es_streams (stream_id, revision) VALUES (p_streams[i], n - 1)
                ON CONFLICT (stream_id) DO NOTHING
                RETURNING revision INTO cur;
                IF NOT FOUND THEN
                    SELECT revision INTO cur FROM es_streams WHERE stream_id = p_streams[i];
                    RAISE EXCEPTION 'wrong expected revision' USING ERRCODE = 'ES001', DETAIL = p_streams[i], HINT = coalesce(cur, -1)::text;
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
                RAISE EXCEPTION 'wrong expected revision' USING ERRCODE = 'ES001', DETAIL = p_streams[i], HINT = coalesce(cur, -1)::text;
            END IF;
        END IF;
        starts := starts || (cur - n + 1);
    END LOOP;

    INSERT INTO es_events (event_id, stream_id, revision, event_type, data, metadata)
    SELECT x.id, p_streams[x.sidx], starts[x.sidx] + x.off, x.typ, x.dat, x.meta
    FROM unnest(p_ids, p_stream_idx, p_rev_off, p_types, p_data, p_meta) AS x(id, sidx, off, typ, dat, meta);

    RETURN QUERY
    SELECT pg_current_xact_id()::text,
           coalesce((SELECT max(seq) FROM es_events WHERE tx_id = pg_current_xact_id()), 0),
           ARRAY(SELECT starts[k] + p_counts[k] - 1 FROM generate_subscripts(p_streams, 1) k);
END
$$;
