-- The expiry sweep finds expired records through a btree, in expiry order.
-- The BRIN index it replaces did not narrow the sweep: records are
-- rewritten (created, then their outcome, then receipts) into whatever
-- pages have room, so every block range soon spans old and new expiries,
-- and the planner preferred reading the whole table, at every sweep.
--
-- CREATE INDEX blocks writes to the table while it builds. On a large
-- table, build it first without blocking them, then migrate (this keeps
-- it, and rebuilds it if that build failed and left it invalid):
--   CREATE INDEX CONCURRENTLY records_expiry ON <schema>.records (expires_ns);
-- The locks this takes wait at most the lock_timeout the migration sets
-- for a transaction that holds the table (the migration is then run again
-- after a pause), rather than queueing every instance's writes behind them.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass('records_expiry') AND NOT indisvalid) THEN
        DROP INDEX records_expiry;
    END IF;
    IF to_regclass('records_expiry') IS NULL THEN
        CREATE INDEX records_expiry ON records (expires_ns);
    END IF;
END
$$;
DROP INDEX IF EXISTS records_expires;
