-- What the live feed needs from each ledger row without a join: the item's kind and priority
-- (for `transition` events and queue-depth deltas) and the inserting transaction's id, so that a
-- reader can tell whether a row was already counted in a snapshot (pg_visible_in_snapshot).
-- Adding columns fires no row trigger: the ledger stays append-only.
ALTER TABLE core.ledger
    ADD COLUMN kind     text,
    ADD COLUMN priority smallint,
    ADD COLUMN tx       xid8 NOT NULL DEFAULT pg_current_xact_id();
