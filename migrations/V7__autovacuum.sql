-- Vacuum the hot tables by what changed, not by how big they have grown (the default
-- autovacuum_vacuum_scale_factor 0.2 waits for a fifth of the table to be dead: with a
-- million rows of history, 200,000 dead item versions that every lease scan of the queue's
-- head would step over).
--
-- core.items: every lease, completion, failure and replay changes `state`, a column of the
-- items_lease_order predicate, so those updates are never HOT and leave a dead version plus dead
-- index entries at the head of the queue. Vacuum after 1,000 + 1% dead tuples, with ten times
-- the default cost budget. fillfactor stays 80 (V1): heartbeats are HOT.
ALTER TABLE core.items SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_limit = 2000,
    autovacuum_analyze_scale_factor = 0.02
);

-- core.leases: inserted once, updated once (the outcome), and none of the updated columns is
-- indexed: room on the page makes that update HOT. Applies to pages written from now on.
ALTER TABLE core.leases SET (
    fillfactor = 85,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_cost_limit = 2000
);

-- core.ledger is insert-only: the defaults (insert-triggered vacuum at 20%) keep its visibility
-- map current; nothing to tune.
