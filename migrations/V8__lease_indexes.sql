-- The lease path walked items_lease_order (kind, priority, enqueued_at, id) over queued *and*
-- leased items, filtering on the heap: every item under a live lease sits at the head of that
-- order, so each lease request fetched and stepped over all of them (with 2,048 items in
-- flight, 16 workers × batches of 128, about 2,600 buffer reads per lease statement). Queued
-- items and leases that may have expired now have an index each: the queued index holds only
-- what can be leased now or after a backoff, and the expiry index is read only up to `now`, so
-- items under a live lease are never visited.
--
-- items_lease_order stays: migrations only add (expand before contract), and a binary one
-- release behind still leases through it while this release rolls out or after a rollback.
-- Drop it in a migration of a later release, once no binary older than this one runs.
--
-- Cost to know: lease_expires_at is now an indexed column, so heartbeats are no longer HOT
-- updates (V7's comment predates this); in exchange no lease statement steps over live leases.
CREATE INDEX items_queued_order ON core.items (kind, priority, enqueued_at, id)
    WHERE state = 'queued';
CREATE INDEX items_lease_expiry ON core.items (kind, lease_expires_at)
    WHERE state = 'leased';
