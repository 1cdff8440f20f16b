SELECT to_regclass('core.schema_migrations') IS NOT NULL
