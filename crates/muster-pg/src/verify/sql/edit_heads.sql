SELECT id::text, chain_len, chain_head, body FROM core.edits
