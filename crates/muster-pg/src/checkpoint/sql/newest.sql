-- The newest ledger sequence a snapshot shows (0: none).
SELECT coalesce(max(seq), 0) FROM core.ledger
