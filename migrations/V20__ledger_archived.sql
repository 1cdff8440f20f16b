-- Archived ledger segments: `muster ledger-prune --archive FILE`, run as the schema owner, removes
-- from core.ledger the entries of an archive file (`muster ledger-archive`) once the file verifies
-- and Logbook's entries in its range fold to the same checkpoint digests. The runtime role still
-- cannot delete: it has no DELETE privilege on core.ledger.

-- One row per pruned segment: the entries after checkpoint `from_seq` up to checkpoint
-- `through_seq` (whose digest commits to every entry up to it) are in the archive file, no longer
-- in Logbook. The newest row's `through_seq` is the archived boundary.
CREATE TABLE core.ledger_archived (
    through_seq bigint      PRIMARY KEY REFERENCES core.ledger_checkpoints (seq),
    -- Segments are pruned in order, each starting where the one before ended (0: the start).
    from_seq    bigint      NOT NULL UNIQUE CHECK (from_seq >= 0 AND from_seq < through_seq),
    digest      bytea       NOT NULL CHECK (length(digest) = 32),
    entries     bigint      NOT NULL CHECK (entries >= 0),
    -- The newest `at` of the segment's entries: an item whose UUIDv7 id dates from before it may
    -- have had its entries archived (GET /v1/items/{id} answers 410 E_GONE).
    last_at     timestamptz,
    archived_at timestamptz NOT NULL DEFAULT now()
);

-- The last archived entry of every chain that may go on past the boundary (every subject of the
-- segment except an item retention removed whose chain ended inside it): the first entry left in
-- Logbook of such a chain links to it (its prev_hash), and `ledger-verify` walks the chain from
-- here instead of from its start.
CREATE TABLE core.ledger_anchors (
    subject_type text   NOT NULL,
    subject_id   text   NOT NULL,
    subject_seq  bigint NOT NULL CHECK (subject_seq >= 1),
    hash         bytea  NOT NULL CHECK (length(hash) = 32),
    through_seq  bigint NOT NULL REFERENCES core.ledger_archived (through_seq),
    PRIMARY KEY (subject_type, subject_id, subject_seq)
);

-- Append-only like the ledger.
CREATE TRIGGER ledger_archived_no_update_delete BEFORE UPDATE OR DELETE ON core.ledger_archived
    FOR EACH ROW EXECUTE FUNCTION core.ledger_refuse_change();
CREATE TRIGGER ledger_archived_no_truncate BEFORE TRUNCATE ON core.ledger_archived
    FOR EACH STATEMENT EXECUTE FUNCTION core.ledger_refuse_change();
CREATE TRIGGER ledger_anchors_no_update_delete BEFORE UPDATE OR DELETE ON core.ledger_anchors
    FOR EACH ROW EXECUTE FUNCTION core.ledger_refuse_change();
CREATE TRIGGER ledger_anchors_no_truncate BEFORE TRUNCATE ON core.ledger_anchors
    FOR EACH STATEMENT EXECUTE FUNCTION core.ledger_refuse_change();
REVOKE UPDATE, DELETE, TRUNCATE ON core.ledger_archived, core.ledger_anchors FROM PUBLIC;

-- The ledger's triggers still refuse every UPDATE and TRUNCATE, and every DELETE but one of an
-- archived entry (at or below the boundary): replacing the function changes no trigger, so no
-- lock is taken on core.ledger.
CREATE OR REPLACE FUNCTION core.ledger_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'ledger' AND TG_OP = 'DELETE' AND TG_LEVEL = 'ROW' THEN
        IF OLD.seq <= (SELECT max(a.through_seq) FROM core.ledger_archived AS a) THEN
            RETURN OLD;
        END IF;
    END IF;
    RAISE EXCEPTION 'core.% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
