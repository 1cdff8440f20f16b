-- Each item's working state, by id; $14: how many rows must change.
WITH w AS (
    UPDATE core.items i SET state = u.state, attempt = u.attempt, fence = u.fence,
        lease_id = u.lease_id, lease_worker = u.lease_worker,
        lease_expires_at = u.lease_expires_at, not_before = u.not_before,
        parked_digest = u.parked_digest, chain_len = u.chain_len,
        chain_head = u.chain_head,
        result = CASE WHEN u.has_result THEN u.result ELSE i.result END
    FROM unnest($1::uuid[], $2::text[], $3::int4[], $4::int8[], $5::uuid[],
                $6::text[], $7::timestamptz[], $8::timestamptz[], $9::text[],
                $10::int8[], $11::bytea[], $12::bool[], $13::jsonb[])
         AS u(id, state, attempt, fence, lease_id, lease_worker, lease_expires_at,
              not_before, parked_digest, chain_len, chain_head, has_result, result)
    WHERE i.id = u.id
    RETURNING 1)
SELECT core.expect_rows('saving items', count(*), $14) FROM w
