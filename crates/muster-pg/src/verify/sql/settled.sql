SELECT pg_snapshot_xmin(pg_current_snapshot()) >= pg_snapshot_xmax($1::text::pg_snapshot)
