SELECT has_schema_privilege($1, 'core', 'USAGE')
