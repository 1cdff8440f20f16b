-- Fewer writes per transition (expand; V22 drops what this replaces).
--
-- items_listing (V11) took an entry on every lease, since a lease changes `state`. A listing
-- of leased items needs no index of its own: they are the items under a lease (live, or
-- expired and not yet taken over), which items_lease_expiry already holds, few enough to sort.
-- This index leaves them out, so a lease writes one index entry fewer. The build holds writes
-- to core.items for its time (a migration runs in a transaction, so not CONCURRENTLY); the lock
-- timeout bounds the wait for the lock behind a long transaction at 2 s (the migration then
-- fails: rerun it), as in V9.
SET LOCAL lock_timeout = '2s';
CREATE INDEX items_listing_unleased ON core.items (state, kind, priority, id)
    WHERE state <> 'leased';

-- A lease row is inserted narrow and then finished with its outcome, digest and response,
-- about 2.4 times its size: with 15 % of the page free (V7) most of those updates found no room
-- and were not HOT, writing two index entries each. A page filled to 30 % holds its rows once
-- finished. Applies to pages written from now on.
ALTER TABLE core.leases SET (fillfactor = 30);
