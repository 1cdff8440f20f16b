SELECT kind, priority, state, removed FROM core.retention_removed
