SELECT id, target, owner, state, chain_len, chain_head FROM core.edits WHERE id = $1 FOR UPDATE
