INSERT INTO core.ledger_checkpoints (seq, prev_seq, digest, entries, taken_at)
VALUES ($1, $2, $3, $4, now())
ON CONFLICT DO NOTHING
