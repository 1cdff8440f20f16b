-- The contract step V8 announced: items_lease_order (V1) goes. Since V8 no statement reads it
-- (the lease path reads items_queued_order and items_lease_expiry), yet every lease and every
-- enqueue paid an insertion into it: a lease is a non-HOT update (it changes `state`), and the
-- new row version fell under this index's predicate (`state IN ('queued', 'leased')`).
-- Measured on the perf rig (docs/benchmarks.md, profiling notes): the item updates' statement
-- time fell by a fifth and the drain rate rose 6-13 % without it.
--
-- Rollback: a binary of the previous release (V8) serves this schema unchanged; it never read
-- this index. A binary older than V8 would still answer correctly but lease without an index
-- made for its statement: run no binary older than V8 against this schema.
--
-- DROP INDEX takes the table's exclusive lock for a moment; the lock timeout makes this
-- migration fail (and `muster migrate` exit non-zero, to be rerun) rather than queue every
-- lease behind a long-running transaction while it waits for that lock.
SET LOCAL lock_timeout = '5s';
DROP INDEX IF EXISTS core.items_lease_order;
