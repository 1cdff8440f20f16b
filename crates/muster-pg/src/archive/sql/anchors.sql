-- The last entry in ($1, $2] of every chain that may go on past $2: all but an item retention
-- removed whose chain has no entry after $2.
INSERT INTO core.ledger_anchors (subject_type, subject_id, subject_seq, hash, through_seq)
SELECT DISTINCT ON (l.subject_type, l.subject_id)
       l.subject_type, l.subject_id, l.subject_seq, l.hash, $2
FROM core.ledger AS l
WHERE l.seq > $1 AND l.seq <= $2
  AND NOT (l.subject_type = 'item'
           AND NOT EXISTS (SELECT 1 FROM core.items AS i
                           WHERE i.id = CASE WHEN l.subject_type = 'item' THEN l.subject_id::uuid END)
           AND NOT EXISTS (SELECT 1 FROM core.ledger AS m
                           WHERE m.subject_type = l.subject_type AND m.subject_id = l.subject_id
                             AND m.seq > $2))
ORDER BY l.subject_type, l.subject_id, l.subject_seq DESC
