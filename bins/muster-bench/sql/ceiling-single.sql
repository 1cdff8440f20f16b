-- `cargo xtask bench`, the single-item SQL ceiling (docs/benchmarks.md): the rows Muster writes
-- for one lease → complete of one `trawl` item, one item per transaction, as plain SQL run by
-- pgbench with prepared statements (`-M prepared`: pgbench variables become parameters) on
-- the migrated schema — no HTTP, no Rust, no group commit. What a queue that commits each lease
-- and each completion separately can reach with Muster's rows: the item updated twice, a lease
-- row inserted and finished, two ledger rows (hashes not a valid chain, as in floor-full.sql).
-- The actor is spelled E'worker\x3atrawl': in prepared mode pgbench would take the `:trawl`
-- of 'worker:trawl' for a variable, even inside a string.
BEGIN;
SELECT id FROM core.items WHERE kind = 'trawl' AND state = 'queued'
    ORDER BY priority, enqueued_at, id LIMIT 1 FOR UPDATE SKIP LOCKED \gset
UPDATE core.items SET state = 'leased', attempt = attempt + 1, fence = fence + 1,
    lease_id = gen_random_uuid(), lease_worker = 'floor', lease_expires_at = now() + interval '30 s',
    chain_len = chain_len + 1, chain_head = sha256(chain_head)
WHERE id = :id::uuid RETURNING lease_id \gset
INSERT INTO core.leases (id, item_id, kind, fence, worker_id, leased_at)
SELECT lease_id, id, kind, fence, lease_worker, now() FROM core.items WHERE id = :id::uuid;
INSERT INTO core.ledger (subject_type, subject_id, subject_seq, event, from_state, to_state, actor,
    fence, at, data, prev_hash, hash)
SELECT 'item', id::text, chain_len, 'leased', 'queued', 'leased', E'worker\x3atrawl', fence, now(),
    d, chain_head, sha256(chain_head || convert_to(d, 'UTF8'))
FROM (SELECT i.*, json_build_object('attempt', attempt, 'lease_id', lease_id,
                                    'worker_id', lease_worker)::text AS d
      FROM core.items i WHERE id = :id::uuid) x;
COMMIT;
BEGIN;
SELECT count(*) AS locked FROM (
    SELECT l.id FROM core.leases l JOIN core.items i ON i.id = l.item_id
    WHERE l.id = :lease_id::uuid FOR UPDATE OF i, l) x \gset
UPDATE core.items SET state = 'done', lease_id = NULL, lease_worker = NULL, lease_expires_at = NULL,
    result = '{}', chain_len = chain_len + 1, chain_head = sha256(chain_head)
WHERE id = :id::uuid;
UPDATE core.leases SET outcome = 'completed', outcome_digest = sha256(convert_to(id::text, 'UTF8')),
    response = json_build_object('state', 'done', 'item_id', item_id, 'replayed', false,
                                 'ledger_seq', 0)::jsonb,
    finished_at = now()
WHERE id = :lease_id::uuid;
INSERT INTO core.ledger (subject_type, subject_id, subject_seq, event, from_state, to_state, actor,
    fence, at, data, prev_hash, hash)
SELECT 'item', i.id::text, i.chain_len, 'completed', 'leased', 'done', E'worker\x3atrawl', i.fence, now(),
    d, i.chain_head, sha256(i.chain_head || convert_to(d, 'UTF8'))
FROM core.items i
CROSS JOIN LATERAL (SELECT json_build_object('lease_id', l.id, 'next', '[]'::json,
                                             'result', '{}'::json)::text AS d
                    FROM core.leases l WHERE l.item_id = i.id AND l.fence = i.fence) x
WHERE i.id = :id::uuid;
COMMIT;
