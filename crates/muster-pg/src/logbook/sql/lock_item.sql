SELECT i.id, i.kind, i.priority, i.state, i.attempt, i.fence, i.lease_id,
       i.lease_worker, i.lease_expires_at, i.not_before, i.parked_digest, i.chain_len,
       i.chain_head, i.trace
FROM core.items i WHERE i.id = $1 FOR UPDATE
