SELECT pg_current_snapshot()::text, coalesce(max(seq), 0) FROM core.ledger
