SELECT DISTINCT ON (subject_type COLLATE "C", subject_id COLLATE "C")
       subject_type, subject_id, subject_seq, hash
FROM core.ledger
WHERE seq <= $1
ORDER BY subject_type COLLATE "C", subject_id COLLATE "C", subject_seq DESC
