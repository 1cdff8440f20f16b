-- Health events stored before redaction knew the cluster's node names (docs/redaction.md) may hold
-- node names that only form-based redaction let through; the live feed republishes stored events
-- on every start. Drop them: the next report of each kind brings its current events, redacted with
-- the names. A data change only: the previous release reads the same columns.
UPDATE core.worker_health SET events = '[]'::jsonb WHERE events <> '[]'::jsonb;
