SELECT seq, digest FROM core.ledger_checkpoints WHERE seq > $1 AND seq <= $2 ORDER BY seq
