-- Listings page by position (docs/listings.md), so the btree indexes of
-- the read models on creation time served only date ranges, and every
-- escrow step and record paid for their upkeep. The projectors now keep a
-- block range index on created_at for date ranges instead (created when a
-- projector starts); a database whose read models were created before
-- this keeps the btree indexes until they are dropped here.
DROP INDEX IF EXISTS rm_escrows_merchant;
DROP INDEX IF EXISTS rm_escrows_seller;
DROP INDEX IF EXISTS rm_escrows_buyer;
DROP INDEX IF EXISTS rm_transactions_customer;
DROP INDEX IF EXISTS rm_transactions_merchant;
