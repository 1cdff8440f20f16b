WITH after AS (
    SELECT l.*,
           row_number() OVER (PARTITION BY l.subject_type, l.subject_id ORDER BY l.subject_seq) = 1
               AS first
    FROM core.ledger AS l
    WHERE l.seq > $1
)
SELECT a.subject_type, a.subject_id, a.subject_seq, a.event, a.from_state, a.to_state, a.actor,
       a.fence, a.at, a.data, a.prev_hash, a.hash, a.seq,
       r.chain_len, r.chain_head, r.body, r.text_removed, coalesce(p.hash, an.hash) AS before_hash
FROM after AS a
LEFT JOIN LATERAL (
    SELECT i.chain_len, i.chain_head, NULL::text AS body, false AS text_removed
    FROM core.items AS i
    WHERE a.first AND a.subject_type = 'item' AND i.id = a.subject_id::uuid
    UNION ALL
    SELECT e.chain_len, e.chain_head, e.body, e.body IS NULL AND e.state = 'rejected'
    FROM core.edits AS e
    WHERE a.first AND a.subject_type = 'edit' AND e.id = a.subject_id::uuid
    UNION ALL
    SELECT k.chain_len, k.chain_head, NULL::text, false FROM core.kind_pauses AS k
    WHERE a.first AND a.subject_type = 'kind' AND k.kind = a.subject_id
) AS r ON true
LEFT JOIN core.ledger AS p
    ON a.first AND p.subject_type = a.subject_type AND p.subject_id = a.subject_id
       AND p.subject_seq = a.subject_seq - 1
-- The entry before was archived: the chain's anchor (V20).
LEFT JOIN core.ledger_anchors AS an
    ON a.first AND an.subject_type = a.subject_type AND an.subject_id = a.subject_id
       AND an.subject_seq = a.subject_seq - 1
ORDER BY a.subject_type, a.subject_id, a.subject_seq
