-- The worker image digest Shipkeeper reports as deployed, one row per kind. Parked
-- (needs_subtool) items of a kind are replayed in the transaction that records a new digest.
CREATE TABLE core.worker_digests (
    kind        text        PRIMARY KEY,
    digest      text        NOT NULL CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
    reported_at timestamptz NOT NULL
);
