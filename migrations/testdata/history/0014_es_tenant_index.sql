-- The audit trail (GET /v1/events) reads one merchant environment's events
-- in commit order after a position: this index serves "these events after
-- (tx_id, seq)" as one range scan, without reading other merchants' events.
-- The tenant is read from the metadata every event carries (domain.Meta);
-- the index is ordered like the log, so a page is its first rows.
--
-- Cost: each append evaluates the two expressions on its metadata (a few
-- hundred bytes of json) and inserts one more index entry. On an existing
-- store, CREATE INDEX reads the whole table and holds appends (not reads)
-- until it ends; for a large store, run `escrowd migrate` by itself in a
-- maintenance window, as for 0007.
CREATE INDEX es_events_tenant_idx ON es_events
    ((metadata ->> 'merchantId'), (metadata ->> 'environment'), tx_id, seq);
