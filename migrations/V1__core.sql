-- Logbook's working tables for Muster: items, leases and the append-only ledger.
-- Changed only by new files in migrations/; never edit an applied file (its checksum is kept).

CREATE SCHEMA IF NOT EXISTS core;

-- One row per work item. The row is the item's working state; its history is in core.ledger.
CREATE TABLE core.items (
    id               uuid        PRIMARY KEY,
    kind             text        NOT NULL,
    priority         smallint    NOT NULL CHECK (priority BETWEEN 0 AND 2), -- 0 urgent, 1 normal, 2 backfill
    state            text        NOT NULL CHECK (state IN ('queued', 'leased', 'done', 'failed', 'needs_subtool')),
    attempt          integer     NOT NULL CHECK (attempt >= 0),
    fence            bigint      NOT NULL CHECK (fence >= 0),
    enqueued_at      timestamptz NOT NULL,                 -- place in line (FIFO within a priority)
    not_before       timestamptz,                          -- retry backoff
    lease_id         uuid,
    lease_worker     text,
    lease_expires_at timestamptz,
    parked_digest    text,
    payload          jsonb       NOT NULL,
    result           jsonb,
    idempotency_key  text,
    parent_id        uuid,
    created_at       timestamptz NOT NULL,
    chain_len        bigint      NOT NULL,                 -- ledger entries of this item
    chain_head       bytea       NOT NULL CHECK (length(chain_head) = 32),
    CONSTRAINT items_lease_iff_leased
        CHECK ((state = 'leased') = (lease_id IS NOT NULL AND lease_worker IS NOT NULL AND lease_expires_at IS NOT NULL))
) WITH (fillfactor = 80); -- room for HOT updates: leases, heartbeats and completions rewrite the row

-- The lease path walks this index in lease order; done, failed and parked items are not in it,
-- so its size follows the live backlog, not the history.
CREATE INDEX items_lease_order ON core.items (kind, priority, enqueued_at, id)
    WHERE state IN ('queued', 'leased');
CREATE UNIQUE INDEX items_idempotency ON core.items (kind, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX items_parked ON core.items (kind) WHERE state = 'needs_subtool';

-- One row per lease ever granted: the fence it holds and, once finished, what finished it, so
-- that a retried delivery gets the same answer.
CREATE TABLE core.leases (
    id             uuid        PRIMARY KEY,
    item_id        uuid        NOT NULL REFERENCES core.items (id),
    kind           text        NOT NULL,
    fence          bigint      NOT NULL,
    worker_id      text        NOT NULL,
    leased_at      timestamptz NOT NULL,
    outcome        text        CHECK (outcome IN ('completed', 'failed', 'parked', 'late')),
    outcome_digest bytea       CHECK (length(outcome_digest) = 32),
    response       jsonb,
    finished_at    timestamptz,
    CONSTRAINT leases_one_per_fence UNIQUE (item_id, fence),
    CONSTRAINT leases_outcome_complete CHECK ((outcome IS NULL) = (outcome_digest IS NULL))
);

-- The ledger: every result and state change, append-only, hash-chained per subject.
CREATE TABLE core.ledger (
    seq          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subject_type text        NOT NULL CHECK (subject_type IN ('item', 'edit')),
    subject_id   text        NOT NULL,
    subject_seq  bigint      NOT NULL CHECK (subject_seq >= 1),
    event        text        NOT NULL,
    from_state   text,
    to_state     text,
    actor        text        NOT NULL,
    fence        bigint,
    at           timestamptz NOT NULL,
    data         text        NOT NULL, -- JSON text, hashed byte for byte
    prev_hash    bytea       NOT NULL CHECK (length(prev_hash) = 32),
    hash         bytea       NOT NULL CHECK (length(hash) = 32),
    CONSTRAINT ledger_subject_seq UNIQUE (subject_type, subject_id, subject_seq)
);

-- Append-only in the database itself: these refuse UPDATE, DELETE and TRUNCATE for every role,
-- superusers included (short of disabling triggers, which itself needs table ownership).
CREATE FUNCTION core.ledger_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'core.ledger is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

CREATE TRIGGER ledger_no_update_delete BEFORE UPDATE OR DELETE ON core.ledger
    FOR EACH ROW EXECUTE FUNCTION core.ledger_refuse_change();
CREATE TRIGGER ledger_no_truncate BEFORE TRUNCATE ON core.ledger
    FOR EACH STATEMENT EXECUTE FUNCTION core.ledger_refuse_change();

REVOKE UPDATE, DELETE, TRUNCATE ON core.ledger FROM PUBLIC;
