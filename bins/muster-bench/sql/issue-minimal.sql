-- `cargo xtask bench`: the issue's single-item script (issue-single.sql) on the lightest tables
-- it could have run on (issue-minimal-setup.sql): one lease transaction (`FOR UPDATE SKIP
-- LOCKED` of the first queued item, its update) and one complete transaction (the item's
-- update, one ledger row, the next step's item inserted). The issue does not say which tables
-- its script ran on; this is the stricter of the two readings of its target.
BEGIN;
SELECT id FROM minimal.queue WHERE kind = 'trawl' AND state = 'queued'
    ORDER BY priority, enqueued_at, id LIMIT 1 FOR UPDATE SKIP LOCKED \gset
UPDATE minimal.queue SET state = 'leased', attempt = attempt + 1,
    lease_expires_at = now() + interval '30 s'
WHERE id = :id::uuid;
COMMIT;
BEGIN;
UPDATE minimal.queue SET state = 'done', result = '{}' WHERE id = :id::uuid;
INSERT INTO minimal.ledger (item_id, event, at, data)
VALUES (:id::uuid, 'completed', now(), '{"result":{}}');
INSERT INTO minimal.queue (id, kind, priority, state, enqueued_at, attempt, payload)
VALUES (gen_random_uuid(), 'next', 1, 'queued', now(), 0, '{}');
COMMIT;
