SELECT count(*) FROM core.ledger WHERE subject_seq = 1 AND seq <= $1
