-- The lease path walked items_lease_order (kind, priority, enqueued_at, id) over queued *and*
-- leased items, filtering on the heap: every item under a live lease sits at the head of that
-- order, so each lease request fetched and stepped over all of them (with 2,048 items in
-- flight, 16 workers × batches of 128, about 2,600 buffer reads per lease statement). Queued
-- items and leases that may have expired now have an index each: the queued index holds only
-- what can be leased now or after a backoff, and the expiry index is read only up to `now`, so
-- items under a live lease are never visited.
CREATE INDEX items_queued_order ON core.items (kind, priority, enqueued_at, id)
    WHERE state = 'queued';
CREATE INDEX items_lease_expiry ON core.items (kind, lease_expires_at)
    WHERE state = 'leased';
DROP INDEX core.items_lease_order;
