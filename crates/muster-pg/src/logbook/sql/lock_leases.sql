SELECT l.id, l.item_id, l.fence, l.worker_id, l.outcome, l.outcome_digest, l.response,
       l.leased_at,
       i.id, i.kind, i.priority, i.state, i.attempt, i.fence, i.lease_id,
       i.lease_worker, i.lease_expires_at, i.not_before, i.parked_digest, i.chain_len,
       i.chain_head, i.trace,
       now()
FROM core.leases l JOIN core.items i ON i.id = l.item_id
WHERE l.id = ANY($1)
ORDER BY i.id, l.id
FOR UPDATE OF i, l
