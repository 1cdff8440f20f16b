INSERT INTO core.items (id, kind, priority, state, attempt, fence, enqueued_at,
    payload, parent_id, created_at, chain_len, chain_head, trace)
SELECT id, kind, priority, state, 0, 0, at, payload, parent, at, chain_len, head, trace
FROM unnest($1::uuid[], $2::text[], $3::int2[], $4::text[], $5::timestamptz[],
            $6::jsonb[], $7::uuid[], $8::int8[], $9::bytea[], $10::bytea[])
     AS n(id, kind, priority, state, at, payload, parent, chain_len, head, trace)
