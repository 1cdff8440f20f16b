SELECT secret FROM core.intake_secrets WHERE name = 'pow_key'
