-- Event data and metadata are stored as json, not jsonb (docs/performance.md,
-- session 7).
--
-- Nothing queries inside an event's data or metadata: every reader decodes
-- it in Go. jsonb costs CPU on every append all the same (the text is
-- parsed and a binary form built), and it rewrites what the writer sent
-- (key order, spacing, duplicate keys, number forms). json only checks the
-- text is valid JSON and keeps it byte for byte, which is also what an
-- auditor replaying the history wants. Measured with psql, 100,000 rows of
-- a ~600-byte event body: INSERT into jsonb 1289 ms, into json 409 ms
-- (about 9 us of server CPU saved per event).
--
-- json accepts a little that jsonb refused although it is valid JSON: the
-- escape \u0000, unpaired UTF-16 surrogate escapes, numbers beyond
-- numeric's range. The adapter (eventstore/postgres) still refuses the
-- first two, so that an event whose strings no text column can hold is
-- refused at append as before instead of stopping a projection later.
--
-- Cost for an existing store: ALTER ... TYPE rewrites es_events once (every
-- row converted, every index rebuilt) under an ACCESS EXCLUSIVE lock held
-- until this migration commits, so appends and reads wait for it and the
-- table needs about its size again in free disk meanwhile. Every escrowd
-- command applies pending migrations when it starts, so the first one
-- after the upgrade pays this; for a large store, run `escrowd migrate` by
-- itself in a maintenance window before starting the new servers. Rows
-- written before keep jsonb's normalised text (their original bytes are
-- gone); rows written after are stored as sent.
ALTER TABLE es_events
    ALTER COLUMN data TYPE json USING data::json,
    ALTER COLUMN metadata TYPE json USING metadata::json;

-- es_append as in 0006, with json[] for p_data and p_meta.
DROP FUNCTION es_append(text[], bigint[], int[], uuid[], text[], jsonb[], jsonb[], int[], int[], boolean);

CREATE FUNCTION es_append(
    p_streams text[], p_expected bigint[], p_counts int[],
    p_ids uuid[], p_types text[], p_data json[], p_meta json[],
    p_stream_idx int[], p_rev_off int[], p_check_ids boolean DEFAULT true)
RETURNS TABLE (tx text, last_seq bigint, revisions bigint[])
LANGUAGE plpgsql AS $$
DECLARE
    i int;
    n int;
    cur bigint;
    starts bigint[] := '{}';
    existing int;
    matching int;
    top bigint;
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

    WITH ins AS (
        INSERT INTO es_events (event_id, stream_id, revision, event_type, data, metadata)
        SELECT x.id, p_streams[x.sidx], starts[x.sidx] + x.off, x.typ, x.dat, x.meta
        FROM unnest(p_ids, p_stream_idx, p_rev_off, p_types, p_data, p_meta) AS x(id, sidx, off, typ, dat, meta)
        RETURNING seq)
    SELECT max(seq) INTO top FROM ins;

    RETURN QUERY
    SELECT pg_current_xact_id()::text,
           coalesce(top, 0),
           ARRAY(SELECT starts[k] + p_counts[k] - 1 FROM generate_subscripts(p_streams, 1) k);
END
$$;
