INSERT INTO core.leases (id, item_id, kind, fence, worker_id, leased_at)
SELECT u.id, u.item_id, $3, u.fence, u.worker_id, $5
FROM unnest($1::uuid[], $2::uuid[], $4::int8[], $6::text[])
     AS u(id, item_id, fence, worker_id)
