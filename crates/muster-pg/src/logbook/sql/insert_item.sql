-- One item; nothing when its kind already has an item with its idempotency key.
--   $1 id  $2 kind  $3 priority  $4 state  $5 attempt  $6 fence
--   $7 created at  $8 payload  $9 idempotency key  $10 parent id  $11 chain length
--   $12 chain head  $13 place in line (enqueued_at)  $14 not before (delayed work)
--   $15 trace context (25 bytes, or NULL)
INSERT INTO core.items (id, kind, priority, state, attempt, fence, enqueued_at, not_before,
    payload, idempotency_key, parent_id, created_at, chain_len, chain_head, trace)
VALUES ($1, $2, $3, $4, $5, $6, $13, $14, $8, $9, $10, $7, $11, $12, $15)
ON CONFLICT (kind, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id
