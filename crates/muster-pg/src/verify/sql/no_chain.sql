-- A subject whose chain has no entry after the archived boundary ($1; the walk checks those)
-- and whose recorded head is not the anchor its last archived entry left (V20): a chain missing
-- entirely, or one archived whole whose subject row no longer records its end.
SELECT subject, EXISTS (SELECT 1 FROM core.ledger_anchors AS an
                        WHERE an.subject_type = missing.subject_type
                          AND an.subject_id = missing.subject_id) AS archived
FROM (
    SELECT 'item:' || i.id::text AS subject, 'item' AS subject_type, i.id::text AS subject_id
    FROM core.items AS i
    WHERE i.chain_len > 0 AND NOT EXISTS (
        SELECT 1 FROM core.ledger AS l
        WHERE l.subject_type = 'item' AND l.subject_id = i.id::text AND l.seq > $1)
      AND NOT EXISTS (
        SELECT 1 FROM core.ledger_anchors AS an
        WHERE an.subject_type = 'item' AND an.subject_id = i.id::text
          AND an.subject_seq = i.chain_len AND an.hash = i.chain_head)
    UNION ALL
    SELECT 'edit:' || e.id::text, 'edit', e.id::text FROM core.edits AS e
    WHERE e.chain_len > 0 AND NOT EXISTS (
        SELECT 1 FROM core.ledger AS l
        WHERE l.subject_type = 'edit' AND l.subject_id = e.id::text AND l.seq > $1)
      AND NOT EXISTS (
        SELECT 1 FROM core.ledger_anchors AS an
        WHERE an.subject_type = 'edit' AND an.subject_id = e.id::text
          AND an.subject_seq = e.chain_len AND an.hash = e.chain_head)
    UNION ALL
    SELECT 'kind:' || k.kind, 'kind', k.kind FROM core.kind_pauses AS k
    WHERE k.chain_len > 0 AND NOT EXISTS (
        SELECT 1 FROM core.ledger AS l
        WHERE l.subject_type = 'kind' AND l.subject_id = k.kind AND l.seq > $1)
      AND NOT EXISTS (
        SELECT 1 FROM core.ledger_anchors AS an
        WHERE an.subject_type = 'kind' AND an.subject_id = k.kind
          AND an.subject_seq = k.chain_len AND an.hash = k.chain_head)
) AS missing
ORDER BY subject
LIMIT 1
