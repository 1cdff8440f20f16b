SELECT coalesce(max(seq), 0) FROM core.ledger
