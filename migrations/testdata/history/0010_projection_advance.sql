-- projection_advance moves a projector's checkpoint from where the applier
-- expects it to the end of the batch it applies, and raises SQLSTATE EP001
-- if the checkpoint is not there (another applier or a rebuild moved it).
--
-- The runner sends a batch's writes in one round trip: this call first
-- (it locks the checkpoint row before any read-model row, the order every
-- applier and rebuild takes), then the projector's statements, all in the
-- one implicit transaction of a pipeline that ends in a single Sync. An
-- UPDATE that matches no row could not stop the statements after it; an
-- error does, and rolls the whole batch back (docs/performance.md,
-- session 9). Before, BEGIN, the move, the writes and COMMIT took four.
CREATE FUNCTION projection_advance(
    p_name text, p_commit bigint, p_prepare bigint,
    p_expected_commit bigint, p_expected_prepare bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE projection_checkpoints
       SET commit_pos = p_commit, prepare_pos = p_prepare, updated_at = now(),
           last_error = NULL, last_error_at = NULL
     WHERE name = p_name AND commit_pos = p_expected_commit AND prepare_pos = p_expected_prepare;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'projection checkpoint % is not where the batch starts', p_name
            USING ERRCODE = 'EP001';
    END IF;
END
$$;
