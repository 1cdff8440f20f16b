-- The newest ledger entry of the oldest-created item of each group of finished items
-- ($1 states × $2 kinds × $3 priorities, the states finished ones): one descent of
-- items_listing_unleased per group and one probe of the ledger's subject index; the oldest of
-- them. A group's first row is found as the first index entry at or after the group's start,
-- kept if it is of the group: with the group's columns bound by equality instead, the planner
-- takes every group for a large one and walks the primary key, through the whole table for an
-- empty group.
SELECT min(l.at)
FROM unnest($1::text[]) AS s (state)
CROSS JOIN unnest($2::text[]) AS k (kind)
CROSS JOIN unnest($3::smallint[]) AS p (priority)
CROSS JOIN LATERAL (
    SELECT i.id, i.chain_len, i.state, i.kind, i.priority FROM core.items i
    WHERE (i.state, i.kind, i.priority) >= (s.state, k.kind, p.priority) AND i.state <> 'leased'
    ORDER BY i.state, i.kind, i.priority, i.id
    LIMIT 1
) AS h
JOIN core.ledger l
    ON l.subject_type = 'item' AND l.subject_id = h.id::text AND l.subject_seq = h.chain_len
WHERE h.state = s.state AND h.kind = k.kind AND h.priority = p.priority
