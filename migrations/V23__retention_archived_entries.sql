-- core.remove_finished (V18) as it must be: its arguments are checked, NULL ones refused, and
-- an item is judged by the newest ledger entry of the chain it is removed with, read in a
-- snapshot taken after the batch holds its locks.
--
-- The race this closes: a batch's snapshot was taken at its statement's start, but the rows it
-- locks are the newest versions (READ COMMITTED re-reads a row updated by a transaction that
-- committed after the snapshot). A late result recorded on a finished item in that moment
-- lengthened the item's chain (chain_len + 1) and inserted the entry, both committed after the
-- snapshot: the batch locked the longer chain, did not see its newest entry, and removed an
-- item whose newest entry was a moment old. Now the rows are locked by one statement and judged
-- by the next: once the batch holds the lock, every transaction that changed the item has
-- committed, so the second statement's snapshot holds the entry at the chain's length. A late
-- result that comes after the removal finds no lease and answers E_LEASE_LOST, recording
-- nothing.
--
-- An item whose newest entry is no longer in Logbook (archived out of it, V20) is judged by the
-- newest `at` of the archived segments, an upper bound of that entry's own, read in the same
-- snapshot. An item with no chain at all (none recorded) has no entry to be younger than the
-- cutoff.
CREATE OR REPLACE FUNCTION core.remove_finished(
    p_state text, p_kind text, p_priority smallint, p_after uuid, p_retain_seconds double precision,
    p_batch integer)
RETURNS TABLE (n_scanned integer, last_id uuid, n_removed integer, n_leases integer)
-- Its statements are planned for each call's values (plan_cache_mode): a generic plan knows
-- no group's size and may walk the primary key through every old item for a sparse group.
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    cutoff timestamptz;
    cutoff_ms text;
    cutoff_id uuid;
    locked uuid[];
    gone uuid[];
BEGIN
    IF p_state IS NULL OR p_kind IS NULL OR p_priority IS NULL OR p_after IS NULL
        OR p_retain_seconds IS NULL OR p_batch IS NULL THEN
        RAISE EXCEPTION 'muster: core.remove_finished takes no NULL argument'
            USING ERRCODE = 'MU002';
    END IF;
    IF p_state NOT IN ('done', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'muster: % is not a finished state', p_state USING ERRCODE = 'MU002';
    END IF;
    IF p_retain_seconds = 'NaN' OR p_batch < 1 THEN
        RAISE EXCEPTION 'muster: a retention of % s in batches of % is not one', p_retain_seconds,
            p_batch USING ERRCODE = 'MU002';
    END IF;
    cutoff := now() - make_interval(secs => greatest(p_retain_seconds, 0));
    cutoff_ms := lpad(to_hex((extract(epoch FROM cutoff) * 1000)::bigint), 12, '0');
    cutoff_id := (cutoff_ms || '7000' || '8000' || '000000000000')::uuid;
    PERFORM set_config('lock_timeout', '100ms', true);
    WITH c AS (
        SELECT i.id FROM core.items i
        -- `state <> 'leased'` always holds here (p_state is a finished state); written out,
        -- it lets a generic plan of this statement use items_listing_unleased (V21).
        WHERE i.state = p_state AND i.state <> 'leased' AND i.kind = p_kind
          AND i.priority = p_priority AND i.id > p_after AND i.id < cutoff_id
        ORDER BY i.id
        LIMIT p_batch
        FOR UPDATE SKIP LOCKED
    )
    SELECT coalesce(array_agg(c.id ORDER BY c.id), '{}') INTO locked FROM c;
    n_scanned := cardinality(locked);
    last_id := locked[n_scanned];
    -- A new statement, a new snapshot: it holds every entry of the chains now locked, or the
    -- entry at the chain's length was archived (no longer in Logbook, at or before the newest
    -- archived `at`). The archived segments are read in this same snapshot: a prune records
    -- its segment before it deletes, so an entry this snapshot misses has its segment here.
    SELECT coalesce(array_agg(i.id) FILTER (
               WHERE i.chain_len = 0 OR coalesce(l.at, (SELECT max(a.last_at) FROM core.ledger_archived AS a)) < cutoff), '{}')
    INTO gone
    FROM core.items i LEFT JOIN core.ledger l
        ON l.subject_type = 'item' AND l.subject_id = i.id::text AND l.subject_seq = i.chain_len
    WHERE i.id = ANY (locked);
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
