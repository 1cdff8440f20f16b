-- The lease scan: up to $3 leasable items of kind $1 at $2, locked, in lease order.
--   $1 kind                 text
--   $2 now                  timestamptz: backoffs and leases that end by it are over
--   $3 limit                int8: items asked for
--   $4 payload budget       int8: payloads stop once those before reach it (stored size)
--   $5 queued starts at     timestamptz[3]: per priority (urgent, normal, backfill), the
--   $6 queued starts after  uuid[3]:        hint's (enqueued_at, id); NULL: the beginning
--   $7 expired starts at    timestamptz: the expired side's hint; NULL: the beginning
--   $8 max attempts         int4: an item at it is on its last attempt, and its expired
--   $9 final cutoff         timestamptz: lease is taken over only if it expired by this time
-- A paused kind (core.kind_pauses) has nothing leasable: each side's `NOT EXISTS` does not
-- depend on the row, so it is one probe of the kind's pause row, evaluated before the side's
-- index scan starts (none at all for a paused kind).
-- Each row: the item's columns (as `item_from_row` reads them), its payload (NULL past the
-- budget), its enqueue time, and how many expired leases the scan locked.
WITH q0 AS (
       SELECT i.id, i.kind, i.priority, i.state, i.attempt, i.fence, i.lease_id,
              i.lease_worker, i.lease_expires_at, i.not_before, i.parked_digest, i.chain_len,
              i.chain_head, i.trace, i.payload, i.enqueued_at
       FROM core.items i
       WHERE i.kind = $1 AND i.priority = 0 AND i.state = 'queued'
         AND (i.enqueued_at, i.id) >= (coalesce(($5::timestamptz[])[1], '-infinity'),
                                       coalesce(($6::uuid[])[1], '00000000-0000-0000-0000-000000000000'))
         AND coalesce(i.not_before <= $2, true)
         AND NOT EXISTS (SELECT 1 FROM core.kind_pauses p WHERE p.kind = $1 AND p.paused)
       ORDER BY i.enqueued_at, i.id
       LIMIT $3
       FOR UPDATE SKIP LOCKED
     ),
     q1 AS (
       SELECT i.id, i.kind, i.priority, i.state, i.attempt, i.fence, i.lease_id,
              i.lease_worker, i.lease_expires_at, i.not_before, i.parked_digest, i.chain_len,
              i.chain_head, i.trace, i.payload, i.enqueued_at
       FROM core.items i
       WHERE i.kind = $1 AND i.priority = 1 AND i.state = 'queued'
         AND (i.enqueued_at, i.id) >= (coalesce(($5::timestamptz[])[2], '-infinity'),
                                       coalesce(($6::uuid[])[2], '00000000-0000-0000-0000-000000000000'))
         AND coalesce(i.not_before <= $2, true)
         AND NOT EXISTS (SELECT 1 FROM core.kind_pauses p WHERE p.kind = $1 AND p.paused)
       ORDER BY i.enqueued_at, i.id
       LIMIT $3 - (SELECT count(*) FROM q0)
       FOR UPDATE SKIP LOCKED
     ),
     q2 AS (
       SELECT i.id, i.kind, i.priority, i.state, i.attempt, i.fence, i.lease_id,
              i.lease_worker, i.lease_expires_at, i.not_before, i.parked_digest, i.chain_len,
              i.chain_head, i.trace, i.payload, i.enqueued_at
       FROM core.items i
       WHERE i.kind = $1 AND i.priority = 2 AND i.state = 'queued'
         AND (i.enqueued_at, i.id) >= (coalesce(($5::timestamptz[])[3], '-infinity'),
                                       coalesce(($6::uuid[])[3], '00000000-0000-0000-0000-000000000000'))
         AND coalesce(i.not_before <= $2, true)
         AND NOT EXISTS (SELECT 1 FROM core.kind_pauses p WHERE p.kind = $1 AND p.paused)
       ORDER BY i.enqueued_at, i.id
       LIMIT $3 - (SELECT count(*) FROM q0) - (SELECT count(*) FROM q1)
       FOR UPDATE SKIP LOCKED
     ),
     queued AS (TABLE q0 UNION ALL TABLE q1 UNION ALL TABLE q2),
     expired AS (
       SELECT i.id, i.kind, i.priority, i.state, i.attempt, i.fence, i.lease_id,
              i.lease_worker, i.lease_expires_at, i.not_before, i.parked_digest, i.chain_len,
              i.chain_head, i.trace, i.payload, i.enqueued_at
       FROM core.items i
       WHERE i.kind = $1 AND i.state = 'leased'
         AND i.lease_expires_at >= coalesce($7::timestamptz, '-infinity')
         AND i.lease_expires_at <= $2
         AND (i.attempt < $8 OR i.lease_expires_at <= $9)
         AND NOT EXISTS (SELECT 1 FROM core.kind_pauses p WHERE p.kind = $1 AND p.paused)
       ORDER BY i.priority, i.enqueued_at, i.id
       LIMIT $3
       FOR UPDATE SKIP LOCKED
     ),
     picked AS (
       SELECT * FROM (TABLE queued UNION ALL TABLE expired) c
       ORDER BY c.priority, c.enqueued_at, c.id
       LIMIT $3
     )
SELECT i.id, i.kind, i.priority, i.state, i.attempt, i.fence, i.lease_id,
       i.lease_worker, i.lease_expires_at, i.not_before, i.parked_digest, i.chain_len,
       i.chain_head, i.trace,
       CASE WHEN coalesce(sum(pg_column_size(i.payload)) OVER before, 0) < $4
            THEN i.payload END,
       i.enqueued_at,
       (SELECT count(*) FROM expired)
FROM picked i
WINDOW before AS (ORDER BY i.priority, i.enqueued_at, i.id
                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
ORDER BY i.priority, i.enqueued_at, i.id
