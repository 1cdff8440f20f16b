-- The latest health Shipkeeper reported per worker kind, already redacted. One row per kind and
-- at most the newest 20 events in it: the table does not grow with the number of reports.
CREATE TABLE core.worker_health (
    kind       text        PRIMARY KEY,
    pods       integer     NOT NULL DEFAULT 0,
    ready      boolean,
    restarts   integer     NOT NULL DEFAULT 0,
    phase      text,
    events     jsonb       NOT NULL DEFAULT '[]'::jsonb,
    updated_at timestamptz NOT NULL
);
