-- The journal (upstream, session, seq) is the record's own columns: nothing
-- looks a record up by session and sequence, so the index only cost every
-- write an index insert.
DROP INDEX IF EXISTS records_session;
