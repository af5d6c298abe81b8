-- es_append decides through es_append_batch (0012), as a group of one.
--
-- The two functions held the same per-stream rules (which expectation
-- locks, which reads unlocked, what a stream created or moved looks like)
-- twice; a change to one that missed the other would make an append's
-- outcome depend on whether it went alone or in a group. es_append keeps
-- its signature, its idempotent retry path and its errors (ES001 with the
-- stream and its revision, ES002), so older binaries call it unchanged.
CREATE OR REPLACE FUNCTION es_append(
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
