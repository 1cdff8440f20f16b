-- Checkpoints of the whole ledger: a ledger sequence and a BLAKE3 digest that commits to every
-- entry at or below it, folded from the previous checkpoint's digest and the entries after it
-- in sequence order (muster_ledger::CheckpointFold). One background task of one replica at a
-- time appends them (an advisory lock); `muster ledger-verify --since SEQ` verifies what came
-- after one without reading what came before it.
CREATE TABLE core.ledger_checkpoints (
    seq      bigint      PRIMARY KEY CHECK (seq >= 1),
    -- The checkpoint this one folds from (0: the ledger's start). Unique: a checkpoint has at
    -- most one successor, so two replicas racing can never fork the checkpoints' chain.
    prev_seq bigint      NOT NULL UNIQUE CHECK (prev_seq >= 0 AND prev_seq < seq),
    digest   bytea       NOT NULL CHECK (length(digest) = 32),
    entries  bigint      NOT NULL CHECK (entries >= 0), -- entries folded: seq > prev_seq and <= seq
    taken_at timestamptz NOT NULL
);

-- Append-only like the ledger itself.
CREATE TRIGGER ledger_checkpoints_no_update_delete BEFORE UPDATE OR DELETE ON core.ledger_checkpoints
    FOR EACH ROW EXECUTE FUNCTION core.ledger_refuse_change();
CREATE TRIGGER ledger_checkpoints_no_truncate BEFORE TRUNCATE ON core.ledger_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION core.ledger_refuse_change();

REVOKE UPDATE, DELETE, TRUNCATE ON core.ledger_checkpoints FROM PUBLIC;
