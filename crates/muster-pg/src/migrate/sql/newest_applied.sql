SELECT coalesce(max(version), 0) FROM core.schema_migrations
