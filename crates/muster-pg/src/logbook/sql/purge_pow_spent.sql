DELETE FROM core.pow_spent WHERE expires_at <= $1
