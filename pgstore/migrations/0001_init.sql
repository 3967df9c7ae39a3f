-- Records, queues and instance leases of a shared smppproxy store.
-- Runs with search_path set to the store's schema.

-- One row per (account, idempotency key, segment). Key parts and every
-- string the indexes match are bytea: they may hold any bytes (NUL,
-- invalid UTF-8), as in the Badger store. The index columns are derived
-- from the record on every write; body holds the rest of the record (the
-- package's binary encoding, without State and History) and history its
-- events, each encoded alone, capped at the first and the latest ones.
CREATE SEQUENCE record_wseq;

CREATE TABLE records (
    account        bytea   NOT NULL,
    key            bytea   NOT NULL,
    segment        bytea   NOT NULL,
    state          text    NOT NULL,
    owner_instance text    NOT NULL,
    -- Unix nanoseconds; 9223372036854775807 = never.
    expires_ns     bigint  NOT NULL,
    upstream       bytea   NOT NULL,
    match_id       bytea,
    session        bytea,
    seq            bigint  NOT NULL,
    proxy_id       bytea,
    addr_hash      bytea,
    body           bytea   NOT NULL,
    history        bytea[] NOT NULL,
    -- Write order: of several records holding one index entry, the one
    -- written last owns it (the Badger index is overwritten the same way).
    wseq           bigint  NOT NULL,
    PRIMARY KEY (account, key, segment)
);

CREATE INDEX records_message ON records (upstream, match_id) WHERE match_id IS NOT NULL;
CREATE INDEX records_session ON records (session, seq) WHERE session IS NOT NULL;
CREATE INDEX records_proxy_id ON records (account, proxy_id) WHERE proxy_id IS NOT NULL;
CREATE INDEX records_unknown ON records (upstream, addr_hash) WHERE state = 'unknown' AND addr_hash IS NOT NULL;
-- Records in state sent (few: the submits in flight) for ScanState and
-- ExpireDeadOwners.
CREATE INDEX records_sent ON records (account, key, segment) WHERE state = 'sent';
-- BRIN: the expiry sweep needs no exact index, and a btree would cost
-- every write an index insert.
CREATE INDEX records_expires ON records USING brin (expires_ns);

-- cap_history keeps the first event and the latest n-1.
CREATE FUNCTION cap_history(h bytea[], n integer) RETURNS bytea[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN cardinality(h) <= n THEN h
                ELSE h[1:1] || h[cardinality(h) - n + 2 : cardinality(h)] END
$$;

-- Durable queues of deliver_sm waiting for an ESME. seq is strictly
-- increasing in enqueue order: enqueuing transactions take an advisory
-- lock, so they commit in the order they drew their numbers.
CREATE SEQUENCE queue_seq;

CREATE TABLE queue_entries (
    seq        bigint PRIMARY KEY,
    queue      bytea  NOT NULL,
    expires_ns bigint NOT NULL,
    entry      bytea  NOT NULL
);

CREATE INDEX queue_entries_queue ON queue_entries (queue, seq);
CREATE INDEX queue_entries_expires ON queue_entries (expires_ns);

-- Dedup markers outlive the entry's Ack until its Expires.
CREATE TABLE queue_markers (
    queue      bytea  NOT NULL,
    dedup_key  bytea  NOT NULL,
    seq        bigint NOT NULL,
    expires_ns bigint NOT NULL,
    PRIMARY KEY (queue, dedup_key)
);

CREATE INDEX queue_markers_expires ON queue_markers (expires_ns);

-- Proxy instances sharing the store and their leases. A record's
-- owner_instance names the instance that owns it while it is sent.
CREATE TABLE instances (
    id          text        PRIMARY KEY,
    host        text        NOT NULL,
    pid         integer     NOT NULL,
    token       text        NOT NULL,
    started     timestamptz NOT NULL,
    lease_until timestamptz NOT NULL
);
