UPDATE core.edits SET state = $2, decided_at = $3, chain_len = $4, chain_head = $5 WHERE id = $1
