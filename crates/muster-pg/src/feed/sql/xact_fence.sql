SELECT pg_current_xact_id()::text::int8
