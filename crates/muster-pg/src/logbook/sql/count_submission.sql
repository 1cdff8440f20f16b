INSERT INTO core.intake_counts AS c (day, client_hash, count) VALUES ($1, $2, 1)
ON CONFLICT (day, client_hash) DO UPDATE SET count = c.count + 1 WHERE c.count < $3
RETURNING count
