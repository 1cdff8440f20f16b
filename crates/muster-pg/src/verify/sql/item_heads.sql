SELECT id::text, chain_len, chain_head, NULL::text FROM core.items
