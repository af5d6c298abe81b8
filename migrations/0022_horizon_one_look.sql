-- es_horizon (0006_writer_horizon.sql) with the same rule and less work per
-- call, since every read of the log's tail pays for it.
--
-- - Nothing running at the snapshot (its xmin is its xmax): no look at the
--   locks at all. A writer with an id below xmax has ended, so a later read
--   sees what it committed; any other gets its id at or above xmax.
-- - One look at pg_locks instead of two, finding the writers and their
--   ids together: each writer holds the writer lock, and once it has an id,
--   the lock on that id. A transaction that had an id at the snapshot and
--   appends took the writer lock before it had the id (es_writer_begin
--   refuses otherwise) and keeps it to its end, so at the look it either
--   holds it or has ended, and a later read sees what it committed.
-- - pg_stat_activity only for a writer the look found without the lock on
--   its id: one that has none yet, or got one so recently that its lock is
--   not in the lock table yet (an id is in snapshots a moment before). Its
--   id then comes from pg_stat_get_activity, the function under the view,
--   for those pids alone; a pid gone from the sessions has ended. Which of
--   them count as hidden is unchanged.
CREATE OR REPLACE FUNCTION es_horizon() RETURNS bigint LANGUAGE plpgsql STABLE AS $$
DECLARE
    s pg_snapshot := pg_current_snapshot();
    unnamed int[];
    writing boolean;
    xs bigint[];
    hidden boolean := false;
BEGIN
    IF pg_is_in_recovery() THEN
        RETURN pg_snapshot_xmin(s)::text::bigint;
    END IF;
    IF pg_snapshot_xmin(s) = pg_snapshot_xmax(s) THEN
        RETURN pg_snapshot_xmax(s)::text::bigint;
    END IF;
    WITH l AS (
        SELECT l.locktype, l.pid, l.transactionid FROM pg_locks l
         WHERE l.granted AND l.pid IS NOT NULL
           AND ((l.locktype = 'advisory' AND l.classid = 7242002 AND l.objsubid = 2
                 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))
             OR (l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock')))
    SELECT array_agg(x.transactionid::text::bigint) FILTER (WHERE x.pid IS NOT NULL),
           array_agg(w.pid) FILTER (WHERE x.pid IS NULL),
           count(*) > 0
      INTO xs, unnamed, writing
      FROM (SELECT pid FROM l WHERE locktype = 'advisory') w
      LEFT JOIN (SELECT pid, transactionid FROM l WHERE locktype = 'transactionid') x ON x.pid = w.pid;
    -- A prepared transaction of this database may have appended: it counts.
    SELECT xs || array_agg(p.transaction::text::bigint), writing OR count(*) > 0 INTO xs, writing
      FROM pg_prepared_xacts p WHERE p.database = current_database();
    IF NOT writing THEN
        RETURN pg_snapshot_xmax(s)::text::bigint;
    END IF;
    IF unnamed IS NOT NULL THEN
        SELECT xs || array_agg(a.backend_xid::text::bigint) FILTER (WHERE a.backend_xid IS NOT NULL),
               coalesce(bool_or(NOT (a.backend_xid IS NOT NULL
                   OR pg_has_role(a.usesysid, 'USAGE') OR pg_has_role('pg_read_all_stats', 'USAGE'))), false)
          INTO xs, hidden
          FROM pg_stat_get_activity(NULL) a WHERE a.pid = ANY (unnamed);
    END IF;
    IF hidden THEN
        RETURN pg_snapshot_xmin(s)::text::bigint;
    END IF;
    RETURN least(pg_snapshot_xmax(s)::text::bigint,
                 (SELECT min(x::text::bigint) FROM pg_snapshot_xip(s) x
                   WHERE (x::text::bigint & 4294967295) = ANY (xs)));
END
$$;
