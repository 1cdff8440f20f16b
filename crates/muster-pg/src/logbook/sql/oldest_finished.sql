-- The newest ledger entry of the oldest-created item of each group of finished items
-- ($1 states × $2 kinds × $3 priorities): one probe of items_listing and one of the ledger's
-- subject index per group; the oldest of them.
SELECT min(l.at)
FROM unnest($1::text[]) AS s (state)
CROSS JOIN unnest($2::text[]) AS k (kind)
CROSS JOIN unnest($3::smallint[]) AS p (priority)
CROSS JOIN LATERAL (
    SELECT i.id, i.chain_len FROM core.items i
    WHERE i.state = s.state AND i.kind = k.kind AND i.priority = p.priority
    ORDER BY i.id
    LIMIT 1
) AS h
JOIN core.ledger l
    ON l.subject_type = 'item' AND l.subject_id = h.id::text AND l.subject_seq = h.chain_len
