SELECT seq, digest FROM core.ledger_checkpoints WHERE seq = $1
