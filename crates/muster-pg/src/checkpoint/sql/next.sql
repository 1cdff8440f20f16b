SELECT seq, prev_seq, digest, entries FROM core.ledger_checkpoints
WHERE seq > $1 ORDER BY seq LIMIT 1
