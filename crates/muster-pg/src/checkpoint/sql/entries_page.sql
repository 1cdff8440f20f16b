SELECT seq, hash FROM core.ledger WHERE seq > $1 AND seq <= $2 ORDER BY seq LIMIT 5000
