-- `cargo xtask bench`, the SQL floor (docs/benchmarks.md): the rows Muster writes for one
-- lease → complete of a batch of :batch `trawl` items, as plain SQL run by pgbench on the
-- migrated schema — no HTTP, no Rust, no group commit. Per item: the item updated twice, a
-- lease row inserted and finished, two ledger rows. The ledger rows are the same size as
-- Muster's but their hashes are not a valid chain (sha256 over the row, not BLAKE3 over the
-- previous entry); the database is thrown away.
-- pgbench -D batch=N sets the batch size.
BEGIN;
SELECT array_agg(id) AS ids FROM (
    SELECT id FROM core.items WHERE kind = 'trawl' AND state = 'queued'
    ORDER BY priority, enqueued_at, id LIMIT :batch FOR UPDATE SKIP LOCKED) c \gset
UPDATE core.items SET state = 'leased', attempt = attempt + 1, fence = fence + 1,
    lease_id = gen_random_uuid(), lease_worker = 'floor', lease_expires_at = now() + interval '30 s',
    chain_len = chain_len + 1, chain_head = sha256(chain_head)
WHERE id = ANY (':ids'::uuid[]);
INSERT INTO core.leases (id, item_id, kind, fence, worker_id, leased_at)
SELECT lease_id, id, kind, fence, lease_worker, now() FROM core.items WHERE id = ANY (':ids'::uuid[]);
INSERT INTO core.ledger (subject_type, subject_id, subject_seq, event, from_state, to_state, actor,
    fence, at, data, prev_hash, hash)
SELECT 'item', id::text, chain_len, 'leased', 'queued', 'leased', 'worker:trawl', fence, now(),
    d, chain_head, sha256(chain_head || convert_to(d, 'UTF8'))
FROM (SELECT i.*, json_build_object('attempt', attempt, 'lease_id', lease_id,
                                    'worker_id', lease_worker)::text AS d
      FROM core.items i WHERE id = ANY (':ids'::uuid[])) x;
SELECT array_agg(lease_id) AS lids FROM core.items WHERE id = ANY (':ids'::uuid[]) \gset
COMMIT;
BEGIN;
SELECT count(*) FROM (
    SELECT l.id FROM core.leases l JOIN core.items i ON i.id = l.item_id
    WHERE l.id = ANY (':lids'::uuid[]) ORDER BY i.id, l.id FOR UPDATE OF i, l) locked;
UPDATE core.items SET state = 'done', lease_id = NULL, lease_worker = NULL, lease_expires_at = NULL,
    result = '{}', chain_len = chain_len + 1, chain_head = sha256(chain_head)
WHERE id = ANY (':ids'::uuid[]);
UPDATE core.leases SET outcome = 'completed', outcome_digest = sha256(convert_to(id::text, 'UTF8')),
    response = json_build_object('state', 'done', 'item_id', item_id, 'replayed', false,
                                 'ledger_seq', 0)::jsonb,
    finished_at = now()
WHERE id = ANY (':lids'::uuid[]);
INSERT INTO core.ledger (subject_type, subject_id, subject_seq, event, from_state, to_state, actor,
    fence, at, data, prev_hash, hash)
SELECT 'item', i.id::text, i.chain_len, 'completed', 'leased', 'done', 'worker:trawl', i.fence, now(),
    d, i.chain_head, sha256(i.chain_head || convert_to(d, 'UTF8'))
FROM core.items i
CROSS JOIN LATERAL (SELECT json_build_object('lease_id', l.id, 'next', '[]'::json,
                                             'result', '{}'::json)::text AS d
                    FROM core.leases l WHERE l.item_id = i.id AND l.fence = i.fence) x
WHERE i.id = ANY (':ids'::uuid[]);
COMMIT;
