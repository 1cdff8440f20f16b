SELECT kind, chain_len, chain_head, NULL::text FROM core.kind_pauses
