SELECT subject_type, subject_id, subject_seq, event, from_state, to_state, actor, fence,
       at, data, prev_hash, hash, seq
FROM core.ledger
WHERE seq > $1 AND seq <= $2
ORDER BY seq
LIMIT 5000
