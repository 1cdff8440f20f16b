-- The archived boundary: the newest pruned segment's end checkpoint and digest (none: no row).
SELECT through_seq, digest, last_at FROM core.ledger_archived ORDER BY through_seq DESC LIMIT 1
