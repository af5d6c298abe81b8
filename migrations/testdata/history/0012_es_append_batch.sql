-- es_append_batch: several independent appends in one call and one
-- transaction, each accepted or refused on its own (group commit).
--
-- Under load much of an append's cost is per call, not per event: the
-- round trip, the commit and its WAL flush, the events insert's executor
-- start-up. The store sends the appends that queue up while others are in
-- flight as one call of this function (eventstore/postgres/batch.go;
-- docs/performance.md, session 10).
--
-- The caller guarantees that no stream is written or locked by two of the
-- batch's appends (streams only read, without a lock, may be shared), so
-- the appends are independent and their order does not matter. Entries
-- (p_streams and the arrays beside it) come in byte order of stream over
-- the whole batch, the order es_append locks in, so batches and single
-- appends cannot deadlock; p_cmd[e] is entry e's append, 1..n. Events name
-- their entry in p_stream_idx, as in es_append.
--
-- Each entry is checked exactly as es_append checks it, with the same
-- statements and locks. A failed check refuses its append instead of
-- raising: the append's entries already moved are moved back (a stream it
-- created is deleted), its later entries are skipped, its events are not
-- stored, and the other appends go on. Anything else (an event id stored
-- already, a new stream created concurrently) raises, the whole batch
-- rolls back and the store appends each one alone with es_append.
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
