-- Retention: finished items (done, failed, cancelled) older than the retention period leave the
-- working tables with their leases; their ledger entries stay. The text of a rejected edit
-- proposal is removed after its own, shorter period; its BLAKE3 stays in the proposal's
-- `submitted` ledger entry.

-- Items removed so far per kind, priority and state, counted in the transaction that removes
-- them: the live feed of every replica subtracts these from the depths it counted, so that
-- the depths of finished states follow what the working tables hold.
CREATE TABLE core.retention_removed (
    kind     text     NOT NULL,
    priority smallint NOT NULL,
    state    text     NOT NULL CHECK (state IN ('done', 'failed', 'cancelled')),
    removed  bigint   NOT NULL CHECK (removed >= 0),
    PRIMARY KEY (kind, priority, state)
);

-- One batch of removal within one (state, kind, priority) group of items_listing (V11), in id
-- order after `after`: up to `batch` items are locked, skipping any another transaction holds
-- (a lease, a completion, a cancel or a retry never waits for a batch to find its rows), and
-- those whose newest ledger entry is older than `retain_seconds` (or that have none left in
-- Logbook) are removed with their leases. Ids are UUIDv7: an item created after the cutoff
-- cannot have finished before it, so the scan stops at the cutoff's id, and the cost of a pass
-- follows what is old enough to go, not what the group holds.
--
-- The runtime role may not DELETE from core.items or core.leases; it may only call this
-- function, which runs as the schema owner and removes nothing but finished items. The lock
-- timeout is short: a batch that would wait behind a completion's lock gives way (it fails and
-- the next pass takes the rows) instead of making the completion wait behind it.
CREATE FUNCTION core.remove_finished(
    p_state text, p_kind text, p_priority smallint, p_after uuid, p_retain_seconds double precision,
    p_batch integer)
RETURNS TABLE (n_scanned integer, last_id uuid, n_removed integer, n_leases integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    cutoff timestamptz := now() - make_interval(secs => greatest(p_retain_seconds, 0));
    cutoff_ms text := lpad(to_hex((extract(epoch FROM cutoff) * 1000)::bigint), 12, '0');
    cutoff_id uuid := (cutoff_ms || '7000' || '8000' || '000000000000')::uuid;
    gone uuid[];
BEGIN
    IF p_state NOT IN ('done', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'muster: % is not a finished state', p_state USING ERRCODE = 'MU002';
    END IF;
    PERFORM set_config('lock_timeout', '100ms', true);
    WITH c AS (
        SELECT i.id, i.chain_len FROM core.items i
        WHERE i.state = p_state AND i.kind = p_kind AND i.priority = p_priority
          AND i.id > p_after AND i.id < cutoff_id
        ORDER BY i.id
        LIMIT p_batch
        FOR UPDATE SKIP LOCKED
    )
    SELECT count(*)::integer,
           (array_agg(c.id ORDER BY c.id DESC))[1],
           coalesce(array_agg(c.id) FILTER (WHERE l.at IS NULL OR l.at < cutoff), '{}')
    INTO n_scanned, last_id, gone
    FROM c LEFT JOIN core.ledger l
        ON l.subject_type = 'item' AND l.subject_id = c.id::text AND l.subject_seq = c.chain_len;
    WITH d AS (DELETE FROM core.leases WHERE item_id = ANY (gone) RETURNING 1)
    SELECT count(*)::integer INTO n_leases FROM d;
    WITH d AS (DELETE FROM core.items WHERE id = ANY (gone) RETURNING 1)
    SELECT count(*)::integer INTO n_removed FROM d;
    IF n_removed > 0 THEN
        INSERT INTO core.retention_removed AS r (kind, priority, state, removed)
        VALUES (p_kind, p_priority, p_state, n_removed)
        ON CONFLICT (kind, priority, state) DO UPDATE SET removed = r.removed + EXCLUDED.removed;
    END IF;
    RETURN NEXT;
END;
$$;

-- A rejected proposal's text goes NULL once removed. Dropping NOT NULL changes the catalog
-- only (no scan); the lock timeout bounds the wait for the brief exclusive lock.
SET LOCAL lock_timeout = '2s';
ALTER TABLE core.edits ALTER COLUMN body DROP NOT NULL;
-- The texts still to remove, oldest decision first; rejected proposals are few.
CREATE INDEX edits_text_expiry ON core.edits (decided_at)
    WHERE state = 'rejected' AND body IS NOT NULL;
