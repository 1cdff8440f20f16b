INSERT INTO core.intake_secrets (name, secret) VALUES ('pow_key', $1) ON CONFLICT (name) DO NOTHING
