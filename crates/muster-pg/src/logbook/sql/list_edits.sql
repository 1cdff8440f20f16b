SELECT id, target, owner, body, state, submitted_at FROM core.edits
WHERE state = $1 AND ($2::uuid IS NULL OR id > $2) ORDER BY id LIMIT $3
