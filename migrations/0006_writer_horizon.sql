-- The log's horizon counts only transactions that append events.
--
-- Events are numbered (tx_id, seq) before they commit, so a reader must not
-- pass a position while a transaction that may still commit an earlier one
-- is open. Bounding reads by pg_snapshot_xmin made every open transaction
-- with an id count, in any database of the server: a report, a backup, a
-- read-model rebuild or another application sharing the server held the
-- whole log back for as long as it stayed open. Here a transaction counts
-- only if it appends.
--
-- A log writer announces itself before its first write: es_writer_begin
-- takes a transaction-scoped advisory lock keyed (7242002, its backend pid)
-- while the transaction has no id yet, and refuses to make a transaction
-- that wrote something else into a log writer (the horizon could not tell
-- it from a reader). es_append_batch (and so es_append) calls it first, and
-- a statement trigger calls it before any other insert into es_events.
--
-- es_horizon() is then the position below which every event is final,
-- computed in one statement whose snapshot S is taken before it looks at
-- the locks: the lowest id among the transactions S sees running that hold
-- the writer lock, or S's xmax when none does. A writer whose id is below
-- that either held the lock when it was looked at (it would bound the
-- result) or had ended before, so a read that starts after this statement
-- sees all it committed. A writer without an id when looked at gets one
-- after S, at or above S's xmax. Callers must read with a later statement.
--
-- A writer's id is read from pg_stat_activity, which shows it only to
-- roles that may see the writer's statistics (the same role, a member of
-- it, or pg_read_all_stats); while a writer the caller cannot see holds the
-- lock, and on a standby (where the primary's locks are not visible), the
-- horizon is the server-wide one, as before.

CREATE FUNCTION es_writer_begin() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('escrowd.log_writer', true) IS DISTINCT FROM 'on' THEN
        IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
            RAISE EXCEPTION 'an append must be the first write of its transaction'
                USING ERRCODE = 'ES003';
        END IF;
        PERFORM pg_advisory_xact_lock(7242002, pg_backend_pid());
        PERFORM set_config('escrowd.log_writer', 'on', true);
    END IF;
END
$$;

CREATE FUNCTION es_events_writer() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM es_writer_begin();
    RETURN NULL;
END
$$;

CREATE TRIGGER es_events_writer BEFORE INSERT ON es_events
    FOR EACH STATEMENT EXECUTE FUNCTION es_events_writer();

-- es_append_batch keeps its rules (0001_baseline.sql) under a new name; the
-- function of the old name announces the writer and then decides.
ALTER FUNCTION es_append_batch(int[], text[], bigint[], int[], boolean[], uuid[], text[], json[], json[], int[], int[])
    RENAME TO es_append_batch_decide;

CREATE FUNCTION es_append_batch(
    p_cmd int[],
    p_streams text[], p_expected bigint[], p_counts int[], p_observe boolean[],
    p_ids uuid[], p_types text[], p_data json[], p_meta json[],
    p_stream_idx int[], p_rev_off int[])
RETURNS TABLE (tx text, ok boolean[], revisions bigint[],
               bad_stream text[], bad_rev bigint[], event_ids uuid[], seqs bigint[])
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM es_writer_begin();
    RETURN QUERY SELECT * FROM es_append_batch_decide(p_cmd, p_streams, p_expected, p_counts, p_observe,
        p_ids, p_types, p_data, p_meta, p_stream_idx, p_rev_off);
END
$$;

-- es_log_writers lists the open transactions holding the writer lock in
-- this database: the backend (NULL for a prepared transaction), its
-- transaction id as a bigint (NULL while it has none yet, or when the
-- caller may not see it), and whether the caller may see it.
CREATE FUNCTION es_log_writers()
RETURNS TABLE (pid int, xid bigint, visible boolean)
LANGUAGE sql STABLE AS $$
    SELECT l.pid, a.backend_xid::text::bigint,
           a.pid IS NULL OR a.backend_xid IS NOT NULL
             OR pg_has_role(a.usesysid, 'USAGE') OR pg_has_role('pg_read_all_stats', 'USAGE')
    FROM pg_locks l
    LEFT JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.classid = 7242002 AND l.objsubid = 2 AND l.granted
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    UNION ALL
    SELECT NULL, transaction::text::bigint, true
    FROM pg_prepared_xacts WHERE database = current_database()
$$;

-- es_horizon must run in a transaction of its own (autocommit): its
-- snapshot has to be newer than what the caller read before, and
-- pg_stat_activity keeps what it first showed a transaction until the
-- transaction ends, so a later call in the same one could miss new writers.
CREATE FUNCTION es_horizon() RETURNS bigint LANGUAGE plpgsql STABLE AS $$
DECLARE
    s pg_snapshot := pg_current_snapshot();
    xs bigint[];
    hidden boolean;
BEGIN
    IF pg_is_in_recovery() THEN
        RETURN pg_snapshot_xmin(s)::text::bigint;
    END IF;
    -- No writer at all (the common case on a quiet log) needs no look at
    -- the sessions: any writer below xmax that was running at s would hold
    -- the lock now.
    IF NOT EXISTS (SELECT 1 FROM pg_locks l
                   WHERE l.locktype = 'advisory' AND l.classid = 7242002 AND l.objsubid = 2 AND l.granted
                     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))
       AND NOT EXISTS (SELECT 1 FROM pg_prepared_xacts WHERE database = current_database()) THEN
        RETURN pg_snapshot_xmax(s)::text::bigint;
    END IF;
    -- One look at the locks and sessions: the writers it finds and the ones
    -- it cannot see must come from the same moment.
    SELECT array_agg(w.xid) FILTER (WHERE w.xid IS NOT NULL), coalesce(bool_or(NOT w.visible), false)
      INTO xs, hidden FROM es_log_writers() w;
    IF hidden THEN
        RETURN pg_snapshot_xmin(s)::text::bigint;
    END IF;
    RETURN least(pg_snapshot_xmax(s)::text::bigint,
                 (SELECT min(x::text::bigint) FROM pg_snapshot_xip(s) x
                   WHERE (x::text::bigint & 4294967295) = ANY (xs)));
END
$$;
