SELECT subject FROM (
    SELECT 'item:' || i.id::text AS subject FROM core.items AS i
    WHERE i.chain_len > 0 AND NOT EXISTS (
        SELECT 1 FROM core.ledger AS l
        WHERE l.subject_type = 'item' AND l.subject_id = i.id::text AND l.subject_seq = 1)
    UNION ALL
    SELECT 'edit:' || e.id::text FROM core.edits AS e
    WHERE e.chain_len > 0 AND NOT EXISTS (
        SELECT 1 FROM core.ledger AS l
        WHERE l.subject_type = 'edit' AND l.subject_id = e.id::text AND l.subject_seq = 1)
    UNION ALL
    SELECT 'kind:' || k.kind FROM core.kind_pauses AS k
    WHERE k.chain_len > 0 AND NOT EXISTS (
        SELECT 1 FROM core.ledger AS l
        WHERE l.subject_type = 'kind' AND l.subject_id = k.kind AND l.subject_seq = 1)
) AS missing
ORDER BY subject
LIMIT 1
