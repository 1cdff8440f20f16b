-- The contract step V8 announced: items_lease_order (V1) goes. Since V8 no statement reads it
-- (the lease path reads items_queued_order and items_lease_expiry), yet every lease and every
-- enqueue paid an insertion into it: a lease is a non-HOT update (it changes `state`), and the
-- new row version fell under this index's predicate (`state IN ('queued', 'leased')`).
-- Measured on the perf rig (docs/benchmarks.md, profiling notes): without it the item updates'
-- statement time fell by about a fifth and the drain rate rose by about a tenth (+1 to +20 %
-- per alternating pair).
--
-- Rollback: a binary of the previous release (V8) serves this schema unchanged; it never read
-- this index. A binary older than V8 would still answer correctly but lease without an index
-- made for its statement: run no binary older than V8 against this schema.
--
-- DROP INDEX needs the table's exclusive lock; while it waits for that lock, every statement on
-- core.items waits behind it. The lock timeout bounds that stall at 2 s: if a long-running
-- transaction holds the table longer, this migration fails (`muster migrate` exits non-zero;
-- rerun it) instead of stalling every lease until that transaction ends.
SET LOCAL lock_timeout = '2s';
DROP INDEX IF EXISTS core.items_lease_order;
