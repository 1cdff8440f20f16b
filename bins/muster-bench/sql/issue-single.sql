-- `cargo xtask bench`, the issue's single-item script (docs/benchmarks.md): the pgbench script
-- issue #7 measured on this machine to set its 4,000 cycles/s target at 64 workers — one lease
-- transaction (`FOR UPDATE SKIP LOCKED` of the first queued item, its update) and one complete
-- transaction (the item's update, one ledger row, the next step's item inserted) — on the
-- migrated schema, run in the same bench run as Muster so that the target can be read as a
-- ratio (the issue measured 3,100–3,300 cycles/s with 16 clients; 4,000 / 3,100 = 1.29×).
-- Lighter than ceiling-single.sql: no lease row, one ledger row, no stored answer. The next
-- step is a queued item of kind 'next', which nothing here leases. Hashes are not a valid
-- chain (as in floor-full.sql). The actor is spelled E'worker\x3atrawl' (see ceiling-single.sql).
BEGIN;
SELECT id FROM core.items WHERE kind = 'trawl' AND state = 'queued'
    ORDER BY priority, enqueued_at, id LIMIT 1 FOR UPDATE SKIP LOCKED \gset
UPDATE core.items SET state = 'leased', attempt = attempt + 1, fence = fence + 1,
    lease_id = gen_random_uuid(), lease_worker = 'floor', lease_expires_at = now() + interval '30 s'
WHERE id = :id::uuid;
COMMIT;
BEGIN;
UPDATE core.items SET state = 'done', lease_id = NULL, lease_worker = NULL, lease_expires_at = NULL,
    result = '{}', chain_len = chain_len + 1, chain_head = sha256(chain_head)
WHERE id = :id::uuid RETURNING chain_len, fence \gset
INSERT INTO core.ledger (subject_type, subject_id, subject_seq, event, from_state, to_state, actor,
    fence, at, data, prev_hash, hash)
VALUES ('item', :id, :chain_len, 'completed', 'leased', 'done', E'worker\x3atrawl', :fence, now(),
    '{"result":{}}', sha256(convert_to(:id, 'UTF8')), sha256(convert_to(:id || 'x', 'UTF8')));
INSERT INTO core.items (id, kind, priority, state, attempt, fence, enqueued_at, payload, result,
    parent_id, created_at, chain_len, chain_head)
VALUES (gen_random_uuid(), 'next', 1, 'queued', 0, 0, now(), '{}', NULL, :id::uuid, now(), 0,
    sha256(''::bytea));
COMMIT;
