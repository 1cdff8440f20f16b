SELECT seq, digest, taken_at FROM core.ledger_checkpoints ORDER BY seq DESC LIMIT 1
