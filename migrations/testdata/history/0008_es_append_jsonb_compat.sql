-- es_append with jsonb[] data and metadata, for binaries older than 0007
-- during a rolling upgrade. They call es_append(... $6::jsonb[],
-- $7::jsonb[] ...), and jsonb[] reaches json[] only by an explicit cast,
-- so once 0007 dropped that signature every append of an old instance
-- failed with "function does not exist" until it was replaced. This
-- overload converts and calls the json[] function, so old and new
-- instances append side by side; what an old instance writes is stored as
-- jsonb's text of it, as before 0007. The adapter's explicit json[] casts
-- pick the other signature, so new binaries never come here. Drop it once
-- no binary older than 0007 runs.
CREATE FUNCTION es_append(
    p_streams text[], p_expected bigint[], p_counts int[],
    p_ids uuid[], p_types text[], p_data jsonb[], p_meta jsonb[],
    p_stream_idx int[], p_rev_off int[], p_check_ids boolean DEFAULT true)
RETURNS TABLE (tx text, last_seq bigint, revisions bigint[])
LANGUAGE sql AS $$
    SELECT * FROM es_append(p_streams, p_expected, p_counts, p_ids, p_types,
                            p_data::json[], p_meta::json[], p_stream_idx, p_rev_off, p_check_ids)
$$;
