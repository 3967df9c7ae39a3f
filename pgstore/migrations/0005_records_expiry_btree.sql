-- The expiry sweep finds expired records through a btree, in expiry order.
-- The BRIN index it replaces did not narrow the sweep: records are
-- rewritten (created, then their outcome, then receipts) into whatever
-- pages have room, so every block range soon spans old and new expiries,
-- and the planner preferred reading the whole table, at every sweep.
-- The btree costs each write an index insert (writes already update every
-- index: they change the state the records_sent index is partial on).
--
-- CREATE INDEX blocks writes to the table while it builds. On a large
-- table, build it first without blocking them, then migrate (this finds it):
--   CREATE INDEX CONCURRENTLY records_expiry ON <schema>.records (expires_ns);
CREATE INDEX IF NOT EXISTS records_expiry ON records (expires_ns);
DROP INDEX IF EXISTS records_expires;
