SELECT pg_advisory_xact_lock(hashtext('muster-digest:' || $1))
