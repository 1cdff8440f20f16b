DELETE FROM core.intake_salts WHERE day < $1
