-- The listing counts (docs/listings.md) no longer have a partial index of
-- the counts at zero: the projectors now delete a count in the statement
-- that brings it to zero, and without an index on n every move of a count
-- is a heap-only update (no index entry per move of a hot count). A
-- database whose read models were created before this keeps the index
-- until it is dropped here; a fresh one never has it.
DROP INDEX IF EXISTS rm_escrow_counts_spent;
DROP INDEX IF EXISTS rm_transaction_counts_spent;
DROP INDEX IF EXISTS rm_customer_counts_spent;
DROP INDEX IF EXISTS rm_category_counts_spent;
