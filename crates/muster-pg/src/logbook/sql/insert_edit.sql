INSERT INTO core.edits (id, target, owner, body, state, submitted_at, chain_len, chain_head)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
