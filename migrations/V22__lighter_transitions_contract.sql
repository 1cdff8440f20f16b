-- Drops what V21 replaced and a check that pays for nothing (contract).
--
-- Rollback: a binary of the previous release serves this schema unchanged (no statement names
-- these objects); its listing of leased items walks items_lease_expiry or the primary key.
--
-- Both need the tables' exclusive locks; the lock timeout bounds the stall behind them at 2 s
-- (the migration then fails: rerun it), as in V9.
SET LOCAL lock_timeout = '2s';

-- items_listing: items_listing_unleased (V21) and items_lease_expiry answer every listing.
DROP INDEX IF EXISTS core.items_listing;

-- A lease row is inserted only for an item the same transaction holds locked and has just
-- leased (the domain sets the fence, `leases_one_per_fence` keeps it unique), and items are
-- removed only with their leases (retention, V18). The foreign key added a KEY SHARE lock on
-- the item (a WAL record) and a trigger's query to every lease.
ALTER TABLE core.leases DROP CONSTRAINT IF EXISTS leases_item_id_fkey;
