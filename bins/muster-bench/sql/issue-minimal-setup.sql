-- `cargo xtask bench`: the tables of the issue's script at their lightest (issue-minimal.sql),
-- made anew before each of its runs in the target phase's database (`muster_issue`): a queue
-- table with its primary key and one partial index for the lease order, and a ledger of five
-- columns, nothing of Muster's (no fence, no lease columns, no hash chain, no unique index per
-- subject). 20,000 queued items of kind 'trawl'.
DROP SCHEMA IF EXISTS minimal CASCADE;
CREATE SCHEMA minimal;
CREATE TABLE minimal.queue (
    id               uuid        PRIMARY KEY,
    kind             text        NOT NULL,
    priority         smallint    NOT NULL,
    state            text        NOT NULL,
    enqueued_at      timestamptz NOT NULL,
    attempt          integer     NOT NULL,
    lease_expires_at timestamptz,
    payload          jsonb       NOT NULL,
    result           jsonb
);
CREATE INDEX queue_queued ON minimal.queue (kind, priority, enqueued_at, id) WHERE state = 'queued';
CREATE TABLE minimal.ledger (
    seq     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    item_id uuid        NOT NULL,
    event   text        NOT NULL,
    at      timestamptz NOT NULL,
    data    text        NOT NULL
);
INSERT INTO minimal.queue (id, kind, priority, state, enqueued_at, attempt, payload)
SELECT gen_random_uuid(), 'trawl', 1, 'queued', now(), 0, '{}' FROM generate_series(1, 20000);
