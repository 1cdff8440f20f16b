-- Items keep a trace context (W3C, 25 bytes: trace id, span id, flags): the span that created
-- the item (its enqueue call, or the completion that named it as `next`), so that every later
-- span of its work joins one trace. NULL for items enqueued before this migration.
--
-- The CHECK is added NOT VALID: a new column holds only NULLs, which satisfy it, so the scan
-- a valid CHECK would make of every row under the exclusive lock proves nothing; every row
-- written from now on is checked. Adding a nullable column without a default rewrites no
-- row. The lock timeout bounds the wait for the exclusive lock at 2 s (the migration then
-- fails: rerun it), as in V9.
SET LOCAL lock_timeout = '2s';
ALTER TABLE core.items ADD COLUMN trace bytea,
    ADD CONSTRAINT items_trace_stored CHECK (octet_length(trace) = 25) NOT VALID;
