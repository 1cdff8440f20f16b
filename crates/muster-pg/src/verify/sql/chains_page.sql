SELECT l.subject_type, l.subject_id, l.subject_seq, l.event, l.from_state, l.to_state, l.actor,
       l.fence, l.at, l.data, l.prev_hash, l.hash, l.seq,
       r.chain_len, r.chain_head, r.body, r.text_removed, an.hash AS anchor_hash
FROM core.ledger AS l
-- A chain whose entries before this one were archived begins at its anchor (V20).
LEFT JOIN core.ledger_anchors AS an
    ON an.subject_type = l.subject_type AND an.subject_id = l.subject_id
       AND an.subject_seq = l.subject_seq - 1
LEFT JOIN LATERAL (
    SELECT i.chain_len, i.chain_head, NULL::text AS body, false AS text_removed
    FROM core.items AS i
    WHERE (l.subject_seq = 1 OR an.hash IS NOT NULL)
      AND l.subject_type = 'item' AND i.id = l.subject_id::uuid
    UNION ALL
    SELECT e.chain_len, e.chain_head, e.body, e.body IS NULL AND e.state = 'rejected'
    FROM core.edits AS e
    WHERE (l.subject_seq = 1 OR an.hash IS NOT NULL)
      AND l.subject_type = 'edit' AND e.id = l.subject_id::uuid
    UNION ALL
    SELECT k.chain_len, k.chain_head, NULL::text, false FROM core.kind_pauses AS k
    WHERE (l.subject_seq = 1 OR an.hash IS NOT NULL)
      AND l.subject_type = 'kind' AND k.kind = l.subject_id
) AS r ON true
-- Entries at or below the archived boundary ($4) are the archive's, even while a prune is still
-- deleting them: each chain begins after them, at its anchor.
WHERE (l.subject_type, l.subject_id, l.subject_seq) > ($1, $2, $3) AND l.seq > $4
ORDER BY l.subject_type, l.subject_id, l.subject_seq
LIMIT 2000
