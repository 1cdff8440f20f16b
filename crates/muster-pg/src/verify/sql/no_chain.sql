-- A subject whose chain has no first entry in Logbook and was not anchored when its first
-- entries were archived (V20).
SELECT subject FROM (
    SELECT 'item:' || i.id::text AS subject FROM core.items AS i
    WHERE i.chain_len > 0 AND NOT EXISTS (
        SELECT 1 FROM core.ledger AS l
        WHERE l.subject_type = 'item' AND l.subject_id = i.id::text AND l.subject_seq = 1)
      AND NOT EXISTS (
        SELECT 1 FROM core.ledger_anchors AS an
        WHERE an.subject_type = 'item' AND an.subject_id = i.id::text)
    UNION ALL
    SELECT 'edit:' || e.id::text FROM core.edits AS e
    WHERE e.chain_len > 0 AND NOT EXISTS (
        SELECT 1 FROM core.ledger AS l
        WHERE l.subject_type = 'edit' AND l.subject_id = e.id::text AND l.subject_seq = 1)
      AND NOT EXISTS (
        SELECT 1 FROM core.ledger_anchors AS an
        WHERE an.subject_type = 'edit' AND an.subject_id = e.id::text)
    UNION ALL
    SELECT 'kind:' || k.kind FROM core.kind_pauses AS k
    WHERE k.chain_len > 0 AND NOT EXISTS (
        SELECT 1 FROM core.ledger AS l
        WHERE l.subject_type = 'kind' AND l.subject_id = k.kind AND l.subject_seq = 1)
      AND NOT EXISTS (
        SELECT 1 FROM core.ledger_anchors AS an
        WHERE an.subject_type = 'kind' AND an.subject_id = k.kind)
) AS missing
ORDER BY subject
LIMIT 1
