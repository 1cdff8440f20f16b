SELECT l.seq, l.subject_type, l.subject_id, l.kind, l.priority, l.from_state, l.to_state,
       l.actor, l.at, CASE WHEN l.subject_type IN ('edit', 'kind') THEN l.data END
FROM core.ledger l WHERE l.seq > $1 AND l.seq <= $2 ORDER BY l.seq
