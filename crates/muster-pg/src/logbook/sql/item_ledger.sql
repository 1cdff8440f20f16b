SELECT seq, at, event, from_state, to_state, actor, fence, kind, priority, data FROM core.ledger
WHERE subject_type = 'item' AND subject_id = $1 ORDER BY subject_seq
