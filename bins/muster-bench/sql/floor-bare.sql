-- `cargo xtask bench`, the bare-queue floor (docs/benchmarks.md): what a queue without lease
-- rows and without a ledger writes for one lease → complete of a batch of :batch `trawl`
-- items, as plain SQL run by pgbench on the same migrated table. Per item: the item updated
-- twice.
-- pgbench -D batch=N sets the batch size.
BEGIN;
SELECT array_agg(id) AS ids FROM (
    SELECT id FROM core.items WHERE kind = 'trawl' AND state = 'queued'
    ORDER BY priority, enqueued_at, id LIMIT :batch FOR UPDATE SKIP LOCKED) c \gset
UPDATE core.items SET state = 'leased', attempt = attempt + 1, fence = fence + 1,
    lease_id = gen_random_uuid(), lease_worker = 'floor', lease_expires_at = now() + interval '30 s'
WHERE id = ANY (':ids'::uuid[]);
COMMIT;
BEGIN;
UPDATE core.items SET state = 'done', lease_id = NULL, lease_worker = NULL, lease_expires_at = NULL,
    result = '{}'
WHERE id = ANY (':ids'::uuid[]);
COMMIT;
