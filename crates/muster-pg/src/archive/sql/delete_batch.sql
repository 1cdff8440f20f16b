-- One batch of a prune: the archived entries after $1 up to $2 (a range of at most a batch).
DELETE FROM core.ledger WHERE seq > $1 AND seq <= $2
