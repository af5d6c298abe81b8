-- es_append, leaner on its hot path (docs/performance.md):
--
-- * p_check_ids: the idempotency check (are these event ids stored
--   already?) costs an index probe per event on every append, and only a
--   retry of an append can ever need it. The adapter now calls with false
--   first; a retry of a committed append then fails on its stream revision
--   (ES001) or on the event id's unique index, and only then does the adapter
--   call again with true, which takes the idempotent path or raises ES002.
--   Called with true (the default) the function behaves exactly as before.
-- * The last sequence number comes from the insert's RETURNING instead of a
--   second scan of the transaction's events.
DROP FUNCTION es_append(text[], bigint[], int[], uuid[], text[], jsonb[], jsonb[], int[], int[]);

CREATE FUNCTION es_append(
    p_streams text[], p_expected bigint[], p_counts int[],
    p_ids uuid[], p_types text[], p_data jsonb[], p_meta jsonb[],
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
