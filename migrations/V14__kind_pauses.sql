-- Pausing a kind (an operator's `PUT /v1/kinds/{kind}/paused`): while a kind's row says
-- `paused`, the lease statement hands out none of its items; leases already out go on. One row
-- per kind that was ever paused, created by its first pause and kept after the resume: the
-- state, when it began, the pause's reason and operator, and the head of the kind's ledger
-- chain (subject type `kind`, subject id the kind's name), as core.items keeps an item's.
CREATE TABLE core.kind_pauses (
    kind       text        PRIMARY KEY,
    paused     boolean     NOT NULL,
    since      timestamptz,                           -- when the current state began
    reason     text,                                  -- the pause's reason, while paused
    actor      text,                                  -- who made the current state
    chain_len  bigint      NOT NULL CHECK (chain_len >= 0),
    chain_head bytea       NOT NULL CHECK (length(chain_head) = 32),
    CONSTRAINT kind_pauses_reason_iff_paused CHECK (paused = (reason IS NOT NULL))
);

-- The ledger's subjects gain `kind`. The CHECK is replaced NOT VALID: a brief exclusive lock
-- and no scan (every existing row satisfies the wider list); V15 validates it under a lock that
-- lets reads and writes go on. The lock timeout bounds the wait for the exclusive lock: behind
-- a long transaction this migration fails and is rerun, rather than stalling every ledger
-- insert behind it.
SET LOCAL lock_timeout = '2s';
ALTER TABLE core.ledger DROP CONSTRAINT ledger_subject_type_check,
    ADD CONSTRAINT ledger_subject_type_check
        CHECK (subject_type IN ('item', 'edit', 'kind')) NOT VALID;
