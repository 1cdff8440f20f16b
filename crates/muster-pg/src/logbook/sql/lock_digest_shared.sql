SELECT pg_advisory_xact_lock_shared(hashtext('muster-digest:' || $1))
