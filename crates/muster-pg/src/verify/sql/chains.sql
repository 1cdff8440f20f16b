SELECT subject_type, subject_id, subject_seq, event, from_state, to_state, actor, fence,
       at, data, prev_hash, hash, seq
FROM core.ledger ORDER BY subject_type, subject_id, subject_seq
