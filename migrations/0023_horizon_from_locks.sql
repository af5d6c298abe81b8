-- es_log_writers reads each writer's transaction id from pg_locks.
--
-- It joined the writer locks to pg_stat_activity for backend_xid, and
-- pg_stat_activity copies the status of every backend slot of the server
-- (max_connections of them, each with its query text) on each call: about
-- a millisecond, on every read of the log's tail, the largest single cost
-- of PostgreSQL's time under a steady stream of appends. A transaction with
-- an id holds an exclusive lock on that id (locktype 'transactionid') for
-- as long as it runs, shown in pg_locks with its backend's pid; the
-- smallest such id of a backend is its top-level transaction's (a
-- subtransaction gets its id after its parent). pg_locks shows every lock
-- to every role, so a writer's id is never hidden, and one scan of it finds
-- both the writer locks and the ids.

CREATE OR REPLACE FUNCTION es_log_writers()
RETURNS TABLE (pid int, xid bigint, visible boolean)
LANGUAGE sql STABLE AS $$
    SELECT l.pid,
           min(l.transactionid::text::bigint) FILTER (WHERE l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock'),
           true
    FROM pg_locks l
    WHERE l.granted AND l.pid IS NOT NULL
      AND (l.locktype = 'transactionid'
           OR (l.locktype = 'advisory' AND l.classid = 7242002 AND l.objsubid = 2
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())))
    GROUP BY l.pid
    HAVING bool_or(l.locktype = 'advisory')
    UNION ALL
    SELECT NULL, transaction::text::bigint, true
    FROM pg_prepared_xacts WHERE database = current_database()
$$;
