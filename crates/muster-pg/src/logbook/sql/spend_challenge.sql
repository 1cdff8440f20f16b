INSERT INTO core.pow_spent (spend_key, expires_at) VALUES ($1, $2)
ON CONFLICT (spend_key) DO NOTHING RETURNING 1
