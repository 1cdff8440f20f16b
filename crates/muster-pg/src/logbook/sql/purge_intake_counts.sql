DELETE FROM core.intake_counts WHERE day < $1
