INSERT INTO core.edits (id, state, submitted_at, chain_len, chain_head, target, owner, body)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
