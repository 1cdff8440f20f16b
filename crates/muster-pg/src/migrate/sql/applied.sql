SELECT version, checksum FROM core.schema_migrations ORDER BY version
