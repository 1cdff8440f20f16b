-- A transaction id taken now, after the snapshot that read the newest sequence: every
-- transaction that drew a sequence below it and still runs has a smaller id.
SELECT pg_current_xact_id()::text
