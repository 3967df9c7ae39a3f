-- The install's fingerprint secret, shared by every instance: retries
-- that land on another instance must compute the same fingerprints.
CREATE TABLE secret (
    id    int   PRIMARY KEY CHECK (id = 1),
    value bytea NOT NULL CHECK (length(value) = 32)
);
