-- A queued receipt or MO is claimed by the instance that delivers it, until
-- a time: no two instances deliver one entry at once, and an instance that
-- dies leaves its claims to expire.
ALTER TABLE queue_entries ADD COLUMN claimed_by text;
ALTER TABLE queue_entries ADD COLUMN claimed_until_ns bigint NOT NULL DEFAULT 0;
